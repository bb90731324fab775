//! Unknown sources and path traversal; header injection and malformed HTTP (written byte for byte on a raw `TcpStream`).

use crate::common::*;

both_backends!(
    unknown_sources_and_path_traversal,
    header_injection_and_malformed_http,
);

async fn unknown_sources_and_path_traversal(backend: Backend) {
    let app = spawn(backend).await;
    let unknown = (404, "unknown_source");
    let not_found = (404, "not_found");

    // Through the client: plain unknown names. Each request is correctly signed for `stripe`.
    let body = stripe_body("evt_unknown");
    let headers = stripe_signed(&body);
    for name in [
        "nope",
        "STRIPE",
        "Stripe",
        "stripe-typo",
        "stripe%20",
        "%20stripe",
        "stripe.",
        &"s".repeat(300),
    ] {
        refused(&app, name, name, &headers, body.clone(), unknown).await;
    }
    // The error message names the source, cut to 64 characters.
    let r = app
        .post_webhook(&"s".repeat(300), &headers, body.clone())
        .await;
    let json: serde_json::Value = r.json().await.unwrap();
    let message = json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&"s".repeat(64)) && !message.contains(&"s".repeat(65)),
        "{message}"
    );

    // Raw request targets, so no client normalises them. (target, answer); the body and
    // signature are valid for `stripe` each time, with a fresh event id.
    let targets: [(&str, (u16, &str)); 18] = [
        ("/webhooks/..%2Fstripe", unknown),
        ("/webhooks/..%2fstripe", unknown),
        ("/webhooks/%2e%2e%2fstripe", unknown),
        ("/webhooks/%2E%2E%2Fwebhooks%2Fstripe", unknown),
        ("/webhooks/..", unknown),
        ("/webhooks/%2e%2e", unknown),
        ("/webhooks/stripe%00", unknown),
        ("/webhooks/stripe%2F..", unknown),
        ("/webhooks/stripe;x", unknown),
        ("/webhooks/stripe%0d%0aSet-Cookie:%20a=b", unknown),
        ("/webhooks/%ff%fe", unknown),
        ("/webhooks/../webhooks/stripe", not_found),
        ("/webhooks/./stripe", not_found),
        ("/webhooks//stripe", not_found),
        ("/webhooks/stripe/", not_found),
        ("/webhooks/", not_found),
        ("//webhooks/stripe", not_found),
        ("/admin/v1/../../webhooks/stripe", not_found),
    ];
    for (i, (target, expect)) in targets.iter().enumerate() {
        let body = stripe_body(&format!("evt_path_{i}"));
        let raw = raw_post(
            target,
            &[
                &stripe_signature_line(body.as_bytes()),
                b"Content-Type: application/json",
            ],
            body.as_bytes(),
        );
        let before = store_counts(&app).await;
        let r = raw_request(&app, &raw).await;
        assert_eq!(
            r.error_code(),
            (expect.0, expect.1.to_owned()),
            "target {target}"
        );
        assert!(r.header("set-cookie").is_none(), "target {target}: {r:?}");
        assert_eq!(store_counts(&app).await, before, "target {target}");
    }
    // Any other method on a webhook URL, configured source or not: 405 with `Allow: POST`.
    for (method, path) in [
        (reqwest::Method::GET, "/webhooks/stripe"),
        (reqwest::Method::PUT, "/webhooks/stripe"),
        (reqwest::Method::DELETE, "/webhooks/nope"),
    ] {
        let r = app
            .client
            .request(method.clone(), app.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["allow"], "POST", "{method} {path}");
        assert_eq!(
            error_code(r).await,
            (405, "method_not_allowed".into()),
            "{method} {path}"
        );
    }
    let r = app
        .client
        .head(app.url("/webhooks/stripe"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "POST");
    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Accepted by design: targets that decode to exactly `/webhooks/stripe` are that source.
    // `%73` is an unreserved character ('s'), which percent-decoding turns into the same name;
    // the query string is not part of the path; and an absolute-form target names the path.
    let legit = [
        "/webhooks/%73tripe",
        "/webhooks/stripe?source=../../etc/passwd",
        "http://127.0.0.1/webhooks/stripe",
    ];
    for (i, target) in legit.iter().enumerate() {
        let body = stripe_body(&format!("evt_legit_path_{i}"));
        let raw = raw_post(
            target,
            &[
                &stripe_signature_line(body.as_bytes()),
                b"Content-Type: application/json",
            ],
            body.as_bytes(),
        );
        let r = raw_request(&app, &raw).await;
        assert_eq!(r.status, 200, "target {target}: {r:?}");
        let stored = app
            .store
            .find_event("stripe", &format!("evt_legit_path_{i}"))
            .await
            .unwrap();
        assert_eq!(stored.expect("stored").source, "stripe");
    }
    assert_eq!(app.store.count_events().await.unwrap(), legit.len() as i64);
}

// =======================================================================================
// Header injection and malformed HTTP.

async fn header_injection_and_malformed_http(backend: Backend) {
    let app = spawn(backend).await;
    let gh = br#"{"inject":true}"#.to_vec();
    let sig_line = format!(
        "X-Hub-Signature-256: sha256={}",
        github_sig(GITHUB_SECRET, &gh)
    )
    .into_bytes();

    // Requests the HTTP parser refuses: 400 with no body, before any handler runs, and the
    // connection is closed (nothing after the bad bytes is read as another request).
    let refused_by_parser: [(&str, &[u8]); 9] = [
        (
            "obs-fold continuation line",
            b"X-GitHub-Delivery: abc\r\n X-Injected: 1",
        ),
        (
            "bare CR inside a value",
            b"X-GitHub-Delivery: abc\rX-Injected: 1",
        ),
        ("NUL inside a value", b"X-GitHub-Delivery: abc\x00def"),
        ("DEL inside a value", b"X-GitHub-Delivery: abc\x7fdef"),
        ("space before the colon", b"X-GitHub-Delivery : abc"),
        ("no colon", b"X-GitHub-Delivery abc"),
        ("two Content-Length", b"Content-Length: 0"),
        (
            "Content-Length and chunked (smuggling)",
            b"Transfer-Encoding: chunked",
        ),
        ("non-ASCII header name", b"X-\xc3\xa9: 1"),
    ];
    for (case, line) in refused_by_parser {
        let raw = raw_post("/webhooks/github", &[&sig_line, line], &gh);
        let before = store_counts(&app).await;
        let r = raw_request(&app, &raw).await;
        assert_eq!(r.status, 400, "case {case}: {r:?}");
        assert!(r.body.is_empty() && r.closed, "case {case}: {r:?}");
        assert_eq!(store_counts(&app).await, before, "case {case}");
    }
    let framing: [(&str, &[u8]); 4] = [
        ("CRLF in the request target", b"POST /webhooks/github\r\nX-Injected: 1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        ("Content-Length with a plus sign", b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: +2\r\n\r\n{}"),
        ("Transfer-Encoding gzip, chunked", b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
        ("two Host headers", b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\nHost: y\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"),
    ];
    for (case, raw) in framing {
        let r = raw_request(&app, raw).await;
        assert_eq!(r.status, 400, "case {case}: {r:?}");
        assert!(r.body.is_empty() && r.closed, "case {case}: {r:?}");
    }
    // A request head over the parser's buffer (128 KiB) gets 431, and so do 100 headers
    // (over its limit of 96).
    let big = format!("X-Big: {}", "b".repeat(140 * 1024)).into_bytes();
    let r = raw_request(&app, &raw_post("/webhooks/github", &[&big], &gh)).await;
    assert_eq!(r.status, 431, "{r:?}");
    let many: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("X-H{i}: {i}").into_bytes())
        .collect();
    let many: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
    let r = raw_request(&app, &raw_post("/webhooks/github", &many, &gh)).await;
    assert_eq!(r.status, 431, "{r:?}");
    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Control characters the parser lets through (HTAB) reach the id check: refused as an id.
    let raw = raw_post(
        "/webhooks/github",
        &[&sig_line, b"X-GitHub-Delivery: abc\tX-Injected: 1"],
        &gh,
    );
    let r = raw_request(&app, &raw).await;
    assert_eq!(r.error_code(), (400, "invalid_event_id".into()));
    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // A bare LF ends a header line (RFC 9112 allows a recipient to accept it): the request
    // has two headers, and the delivery id is exactly "gh-bare-lf": nothing is smuggled into
    // it, and no stored header holds a CR or LF.
    let raw = raw_post(
        "/webhooks/github",
        &[&sig_line, b"X-GitHub-Delivery: gh-bare-lf\nX-Injected: 1"],
        &gh,
    );
    let r = raw_request(&app, &raw).await;
    assert_eq!(r.status, 200, "{r:?}");
    let event = app
        .store
        .find_event("github", "gh-bare-lf")
        .await
        .unwrap()
        .expect("stored");
    assert!(event
        .headers
        .iter()
        .any(|(n, v)| n == "x-injected" && v == "1"));
    assert!(event
        .headers
        .iter()
        .all(|(n, v)| !(n.contains(['\r', '\n']) || v.contains(['\r', '\n']))));

    // Credentials a sender attaches are stored redacted, as documented, whatever their case.
    let raw = raw_post(
        "/webhooks/github",
        &[
            &sig_line,
            b"X-GitHub-Delivery: gh-credentials",
            b"AUTHORIZATION: Bearer sender-secret-1",
            b"proxy-authorization: Basic c2VjcmV0",
            b"Cookie: session=sender-secret-2",
        ],
        &gh,
    );
    assert_eq!(raw_request(&app, &raw).await.status, 200);
    let event = app
        .store
        .find_event("github", "gh-credentials")
        .await
        .unwrap()
        .expect("stored");
    for name in ["authorization", "proxy-authorization", "cookie"] {
        let values: Vec<_> = event.headers.iter().filter(|(n, _)| n == name).collect();
        assert_eq!(values.len(), 1, "{name}: {:?}", event.headers);
        assert_eq!(values[0].1, "[redacted]", "{name}");
    }
    assert!(!format!("{:?}", event.headers).contains("sender-secret"));

    // Reflected input never becomes a response header: the unknown source's name (with an
    // encoded CRLF) comes back only inside the JSON body.
    let r = raw_request(
        &app,
        &raw_post("/webhooks/x%0d%0aSet-Cookie:%20pwned=1", &[], b""),
    )
    .await;
    assert_eq!(r.error_code(), (404, "unknown_source".into()));
    assert!(r.header("set-cookie").is_none(), "{r:?}");
    assert!(!r.head.contains("pwned"), "{r:?}");

    // obs-text (bytes >= 0x80) in a delivery id is let through by the HTTP parser. Three
    // different non-UTF-8 delivery ids, each with a valid signature:
    // A header value that is not UTF-8 is left out, never converted lossily (which would
    // merge the three distinct ids into one and drop two events as duplicates): the id is
    // then missing, and each is refused.
    for id in [&b"gh-\xff"[..], b"gh-\xfe", b"gh-\xfd"] {
        let mut line = b"X-GitHub-Delivery: ".to_vec();
        line.extend_from_slice(id);
        let r = raw_request(
            &app,
            &raw_post("/webhooks/github", &[&sig_line, &line], &gh),
        )
        .await;
        assert_eq!(r.error_code(), (400, "missing_event_id".into()), "{r:?}");
    }
    assert!(app
        .store
        .find_event("github", "gh-\u{fffd}")
        .await
        .unwrap()
        .is_none());
    // gh-bare-lf and gh-credentials.
    assert_eq!(app.store.count_events().await.unwrap(), 2);
}
