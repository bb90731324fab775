//! Bodies over the limit (Content-Length or chunked); invalid UTF-8, deep JSON and duplicated id keys.

use crate::common::*;

both_backends!(
    bodies_over_the_limit_with_content_length_or_chunked,
    invalid_utf8_deep_json_and_duplicate_id_keys,
);

fn chunked_stream(body: &[u8], chunk: usize) -> reqwest::Body {
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        body.chunks(chunk).map(|c| Ok(c.to_vec())).collect();
    reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
}

/// A Stripe body of exactly `len` bytes.
fn stripe_body_of_len(id: &str, len: usize) -> String {
    let frame = format!(r#"{{"id":"{id}","pad":""}}"#);
    let body = frame.replace(
        r#""pad":"""#,
        &format!(r#""pad":"{}""#, "p".repeat(len - frame.len())),
    );
    assert_eq!(body.len(), len);
    body
}

async fn bodies_over_the_limit_with_content_length_or_chunked(backend: Backend) {
    let app = spawn(backend).await;
    let too_large = (413, "payload_too_large");

    // One byte over, with a correct Content-Length, then chunked (no Content-Length), in
    // small and in one big chunk. All correctly signed: only the size is wrong.
    let body = stripe_body_of_len("evt_big", MAX_BODY + 1);
    let headers = stripe_signed(&body);
    refused(
        &app,
        "1 byte over, Content-Length",
        "stripe",
        &headers,
        body.clone(),
        too_large,
    )
    .await;
    refused(
        &app,
        "1 byte over, chunked by 100",
        "stripe",
        &headers,
        chunked_stream(body.as_bytes(), 100),
        too_large,
    )
    .await;
    refused(
        &app,
        "1 byte over, chunked in one",
        "stripe",
        &headers,
        chunked_stream(body.as_bytes(), body.len()),
        too_large,
    )
    .await;
    let body = stripe_body_of_len("evt_big2", 3 * MAX_BODY);
    let headers = stripe_signed(&body);
    refused(
        &app,
        "3x over, chunked by 1000",
        "stripe",
        &headers,
        chunked_stream(body.as_bytes(), 1000),
        too_large,
    )
    .await;
    // Over the limit on an unsigned request: still 413 (the body is never verified).
    refused(
        &app,
        "over, unsigned",
        "github",
        &[],
        vec![b'x'; MAX_BODY * 2],
        too_large,
    )
    .await;

    // A huge declared Content-Length is refused before any of the body is read: the answer
    // comes at once although the body never arrives.
    let started = Instant::now();
    let r = raw_request(
        &app,
        b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 1000000000000\r\n\r\n{",
    )
    .await;
    assert_eq!(r.error_code(), (413, "payload_too_large".into()));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The unread body is not drained: the connection is closed after the answer.
    assert!(r.closed, "{r:?}");

    // A chunked body declaring one enormous chunk, then sending past the limit.
    let mut raw = b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n".to_vec();
    raw.extend(vec![b'a'; MAX_BODY + 10]);
    let r = raw_request(&app, &raw).await;
    assert_eq!(r.error_code(), (413, "payload_too_large".into()));
    // The rest of the body is not read: the connection is closed after the answer, so the
    // client cannot keep it (and its socket) with a body that never ends.
    assert!(r.closed, "{r:?}");

    // A chunk size past u64 is a framing error from the HTTP parser: 400, before the handler.
    let raw = b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\naaaa\r\n0\r\n\r\n";
    let r = raw_request(&app, raw).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.closed, "{r:?}");

    // A chunked body whose framing breaks after the first chunk: the handler's body read
    // fails, answered 400 `bad_request` (a code the README's ingest table does not list).
    let raw = b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"id\"\r\nzz\r\n\r\n";
    let r = raw_request(&app, raw).await;
    assert_eq!(r.error_code(), (400, "bad_request".into()));
    assert!(r.closed, "{r:?}");

    // A body shorter than its Content-Length, then the client half-closes.
    let mut stream = TcpStream::connect(socket_addr(&app)).await.unwrap();
    stream
        .write_all(
            b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"id\":",
        )
        .await
        .unwrap();
    stream.shutdown().await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await;
    let r = RawResponse::parse(&buf, true).expect("an answer to a truncated body");
    assert_eq!(r.error_code(), (400, "bad_request".into()));

    // An unknown source is answered 404 whatever the body size: the source is checked first.
    let r = app
        .post_webhook("nope", &[], vec![b'x'; MAX_BODY * 2])
        .await;
    assert_eq!(error_code(r).await, (404, "unknown_source".into()));
    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Accepted: exactly at the limit, chunked (the Content-Length case is in api::ingest).
    let body = stripe_body_of_len("evt_edge_chunked", MAX_BODY);
    let headers = stripe_signed(&body);
    accepted(
        &app,
        "exactly at the limit, chunked",
        "stripe",
        &headers,
        chunked_stream(body.as_bytes(), 999),
    )
    .await;
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

// =======================================================================================
// Invalid UTF-8, deep JSON, duplicated keys.

async fn invalid_utf8_deep_json_and_duplicate_id_keys(backend: Backend) {
    let app = spawn_with(backend, |s| s.server.max_body_bytes = 64 * 1024).await;
    let ts = now().to_string();
    let malformed = (400, "malformed_body");
    let stripe_raw = |body: &[u8]| {
        stripe_with(&format!(
            "t={ts},v1={}",
            stripe_sig(STRIPE_SECRET, &ts, body)
        ))
    };

    // Bodies the id must be read from, each signed correctly.
    let mut deep_array = b"{\"id\":\"evt_deep\",\"x\":".to_vec();
    deep_array.extend(vec![b'['; 10_000]);
    deep_array.extend(vec![b']'; 10_000]);
    deep_array.push(b'}');
    let mut deep_object = Vec::new();
    for _ in 0..5_000 {
        deep_object.extend_from_slice(b"{\"a\":");
    }
    deep_object.extend_from_slice(b"{\"id\":\"evt_deep_obj\"}");
    deep_object.extend(vec![b'}'; 5_000]);
    let cases: Vec<(&str, Vec<u8>, (u16, &str))> = vec![
        (
            "invalid UTF-8 inside the id string",
            b"{\"id\":\"evt_\xff\xfe\"}".to_vec(),
            malformed,
        ),
        (
            "overlong UTF-8 encoding of '/'",
            b"{\"id\":\"evt_\xc0\xaf\"}".to_vec(),
            malformed,
        ),
        (
            "UTF-8 BOM before the JSON",
            b"\xef\xbb\xbf{\"id\":\"evt_bom\"}".to_vec(),
            malformed,
        ),
        (
            "UTF-16LE JSON",
            "{\"id\":\"evt_utf16\"}"
                .encode_utf16()
                .flat_map(u16::to_le_bytes)
                .collect(),
            malformed,
        ),
        (
            "lone surrogate escape",
            br#"{"id":"evt_\ud800"}"#.to_vec(),
            malformed,
        ),
        (
            "10,000 nested arrays (valid JSON)",
            deep_array.clone(),
            malformed,
        ),
        ("5,000 nested objects around the id", deep_object, malformed),
        ("10,000 unclosed arrays", vec![b'['; 10_000], malformed),
        (
            "two JSON documents",
            br#"{"id":"evt_a"}{"id":"evt_b"}"#.to_vec(),
            malformed,
        ),
        (
            "trailing garbage",
            br#"{"id":"evt_trailing"} x"#.to_vec(),
            malformed,
        ),
        (
            "NUL escape in the id",
            br#"{"id":"evt_\u0000"}"#.to_vec(),
            (400, "invalid_event_id"),
        ),
        (
            "newline escape in the id",
            br#"{"id":"evt_\nX-Injected: 1"}"#.to_vec(),
            (400, "invalid_event_id"),
        ),
        (
            "id of 256 bytes",
            format!(r#"{{"id":"{}"}}"#, "e".repeat(256)).into_bytes(),
            (400, "invalid_event_id"),
        ),
        (
            "id is an object",
            br#"{"id":{"a":1}}"#.to_vec(),
            (400, "missing_event_id"),
        ),
        (
            "id is null",
            br#"{"id":null}"#.to_vec(),
            (400, "missing_event_id"),
        ),
        (
            "id is blank",
            br#"{"id":"   "}"#.to_vec(),
            (400, "missing_event_id"),
        ),
        (
            "body is an array",
            br#"[{"id":"evt_arr"}]"#.to_vec(),
            (400, "missing_event_id"),
        ),
        // Duplicate keys: serde_json keeps the last value, so a later null wins.
        (
            "duplicate id, the last null",
            br#"{"id":"evt_dup_null","id":null}"#.to_vec(),
            (400, "missing_event_id"),
        ),
    ];
    for (case, body, expect) in cases {
        refused(&app, case, "stripe", &stripe_raw(&body), body, expect).await;
    }
    // Slack reads its id from the body too.
    let sl = b"{\"event_id\":\"Ev\xff\"}".to_vec();
    refused(
        &app,
        "slack invalid UTF-8",
        "slack",
        &slack_signed_at(&ts, &sl),
        sl,
        malformed,
    )
    .await;
    // The server is still up and answering after all of that.
    let r = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Accepted by design: depth is bounded by serde_json's recursion limit (128), so a
    // moderately nested body is fine.
    let mut nested = b"{\"id\":\"evt_nested_100\",\"x\":".to_vec();
    nested.extend(vec![b'['; 100]);
    nested.extend(vec![b']'; 100]);
    nested.push(b'}');
    accepted(
        &app,
        "100 nested arrays",
        "stripe",
        &stripe_raw(&nested),
        nested.clone(),
    )
    .await;

    // Accepted by design: a duplicated `id` key. serde_json keeps the last value, so the event
    // is stored under "evt_last" (the signed body is kept byte for byte, both keys included).
    // A later event whose id is "evt_last" is then a duplicate of it.
    let dup = br#"{"id":"evt_first","type":"a","id":"evt_last"}"#.to_vec();
    let event = accepted(
        &app,
        "duplicate id key",
        "stripe",
        &stripe_raw(&dup),
        dup.clone(),
    )
    .await;
    assert_eq!(event.provider_event_id, "evt_last");
    assert_eq!(event.body, dup);
    assert!(app
        .store
        .find_event("stripe", "evt_first")
        .await
        .unwrap()
        .is_none());
    let plain = br#"{"id":"evt_last"}"#.to_vec();
    let r = app
        .post_webhook("stripe", &stripe_raw(&plain), plain.clone())
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["idempotent-replayed"], "true");

    // Numeric ids are accepted as their decimal text; one within 64 bits is kept exactly.
    let num = br#"{"id":18446744073709551615}"#.to_vec();
    let event = accepted(
        &app,
        "numeric id u64::MAX",
        "stripe",
        &stripe_raw(&num),
        num,
    )
    .await;
    assert_eq!(event.provider_event_id, "18446744073709551615");
    // Past 64 bits a number has no exact text (serde_json would round it, and distinct ids
    // would collide), so such an id is refused rather than merged.
    for big in [
        &br#"{"id":18446744073709551616}"#[..],
        br#"{"id":18446744073709551617}"#,
        br#"{"id":1.5}"#,
    ] {
        let r = app
            .post_webhook("stripe", &stripe_raw(big), big.to_vec())
            .await;
        assert_eq!(error_code(r).await, (400, "missing_event_id".into()));
    }

    // Accepted by design: when the id is not in the body, the body is opaque bytes. GitHub's
    // invalid UTF-8 and svix's deep JSON (whose type then cannot be read) are stored as sent.
    let bin: Vec<u8> = vec![0xff, 0xfe, 0x00, b'{', 0xc0, 0xaf];
    let event = accepted(
        &app,
        "github invalid UTF-8 body",
        "github",
        &github_signed(&bin, "gh-bin"),
        bin.clone(),
    )
    .await;
    assert_eq!(event.body, bin);
    let event = accepted(
        &app,
        "svix 10,000 nested arrays",
        "svix",
        &svix_signed_at("msg_deep", &ts, &deep_array),
        deep_array.clone(),
    )
    .await;
    assert_eq!(event.body, deep_array);
    assert_eq!(event.event_type, None);
    // The ids past 64 bits were refused, so five events were stored.
    assert_eq!(app.store.count_events().await.unwrap(), 5);
}
