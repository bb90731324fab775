//! Limits an outsider meets at the edge and on the admin side: replay takes each destination
//! once, the raw body is a download, console pages forbid scripts and framing, failed
//! authentications are limited per address, header bytes are capped, and `/metrics` can be
//! kept to its own address and a token.

use reqwest::Method;

use crate::both_backends;
use crate::support::console::{csrf_of, first_cookie, no_redirects};
use crate::support::signing::{now, stripe_headers};
use crate::support::{error_code, spawn_app, spawn_app_with, Backend, ACME_TOKEN, STRIPE_SECRET};

both_backends!(
    a_replay_takes_each_destination_once,
    the_raw_body_is_a_download_whatever_its_type,
    console_pages_forbid_scripts_framing_and_caching,
    failed_admin_authentications_are_limited_per_address,
    failed_console_logins_are_limited_per_address,
    headers_over_the_limit_get_431_and_store_nothing,
    metrics_can_have_their_own_address_and_a_token,
    stored_headers_are_sorted_by_name_with_repeats_in_arrival_order,
);

async fn stored_headers_are_sorted_by_name_with_repeats_in_arrival_order(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = r#"{"id":"evt_header_order","type":"t"}"#;
    let mut headers = vec![
        ("X-Zulu".to_owned(), "z".to_owned()),
        ("X-Repeat".to_owned(), "first".to_owned()),
    ];
    headers.extend(stripe_headers(STRIPE_SECRET, now(), body.as_bytes()));
    headers.push(("X-Alpha".into(), "a".into()));
    headers.push(("X-Repeat".into(), "second".into()));
    headers.push(("X-Repeat".into(), "third".into()));
    let r = app.post_webhook("stripe", &headers, body.to_owned()).await;
    assert_eq!(r.status(), 200);
    let stored = app
        .store
        .find_event("stripe", "evt_header_order")
        .await
        .unwrap()
        .unwrap();
    let names: Vec<&str> = stored.headers.iter().map(|(n, _)| n.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    let repeats: Vec<&str> = stored
        .headers
        .iter()
        .filter(|(n, _)| n == "x-repeat")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(repeats, ["first", "second", "third"]);
}

async fn a_replay_takes_each_destination_once(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = app.ingest_stripe("evt_replay_dupes").await;
    let names = vec!["billing"; 20_000];
    let body = serde_json::json!({ "destinations": names }).to_string();
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/events/{id}/replay"),
            Some(&body),
            None,
        )
        .await;
    assert_eq!(r.status(), 202);
    let reply: serde_json::Value = r.json().await.unwrap();
    assert_eq!(reply["jobs"].as_array().unwrap().len(), 1, "{reply}");
    assert_eq!(app.store.jobs_for_event(id).await.unwrap().len(), 3);
    // A name the source does not route to is still refused, whatever comes with it.
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/events/{id}/replay"),
            Some(r#"{"destinations":["billing","nowhere"]}"#),
            None,
        )
        .await;
    assert_eq!(error_code(r).await, (422, "unprocessable".into()));
    assert_eq!(app.store.jobs_for_event(id).await.unwrap().len(), 3);
}

async fn the_raw_body_is_a_download_whatever_its_type(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = r#"{"id":"evt_html","type":"t","x":"<script>alert(1)</script>"}"#;
    let mut headers = stripe_headers(STRIPE_SECRET, now(), body.as_bytes());
    for (name, value) in &mut headers {
        if name.eq_ignore_ascii_case("content-type") {
            *value = "text/html; charset=utf-8".into();
        }
    }
    let r = app.post_webhook("stripe", &headers, body.to_owned()).await;
    assert_eq!(r.status(), 200);
    let id = r.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let raw = app
        .admin(
            Method::GET,
            ACME_TOKEN,
            &format!("/events/{id}/raw"),
            None,
            None,
        )
        .await;
    assert_eq!(raw.status(), 200);
    let h = raw.headers();
    assert_eq!(h["content-type"], "application/octet-stream");
    assert_eq!(
        h["hookgate-original-content-type"],
        "text/html; charset=utf-8"
    );
    assert_eq!(h["x-content-type-options"], "nosniff");
    let disposition = h["content-disposition"].to_str().unwrap();
    assert!(disposition.starts_with("attachment"), "{disposition}");
    assert_eq!(raw.text().await.unwrap(), body, "the exact bytes");
}

async fn console_pages_forbid_scripts_framing_and_caching(backend: Backend) {
    let app = spawn_app(backend).await;
    let client = no_redirects();
    for path in ["/console/login", "/console/events"] {
        let r = client.get(app.url(path)).send().await.unwrap();
        let h = r.headers();
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'none'"), "{path}: {csp}");
        assert!(!csp.contains("script-src"), "no script allowed: {csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(h["x-frame-options"], "DENY", "{path}");
        assert_eq!(h["referrer-policy"], "no-referrer", "{path}");
        assert_eq!(h["cache-control"], "no-store", "{path}");
    }
}

async fn failed_admin_authentications_are_limited_per_address(backend: Backend) {
    let app = spawn_app(backend).await;
    let burst = app.config.admin.auth_failure_burst;
    for i in 0..burst {
        let r = app
            .admin(Method::GET, "hg_wrong_token", "/events", None, None)
            .await;
        assert_eq!(error_code(r).await, (401, "unauthorized".into()), "try {i}");
    }
    let r = app
        .admin(Method::GET, "hg_wrong_token", "/events", None, None)
        .await;
    let retry_after: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1, "{retry_after}");
    assert_eq!(error_code(r).await, (429, "too_many_auth_failures".into()));
    // While limited, even the right token is not checked: guessing gains nothing.
    let r = app
        .admin(Method::GET, ACME_TOKEN, "/events", None, None)
        .await;
    assert_eq!(r.status(), 429);
}

async fn failed_console_logins_are_limited_per_address(backend: Backend) {
    let app = spawn_app(backend).await;
    let client = no_redirects();
    let r = client.get(app.url("/console/login")).send().await.unwrap();
    let cookie = first_cookie(&r);
    let csrf = csrf_of(&r.text().await.unwrap());
    let attempt = |token: &'static str| {
        client
            .post(app.url("/console/login"))
            .header("cookie", &cookie)
            .form(&[("csrf", csrf.as_str()), ("token", token)])
            .send()
    };
    for _ in 0..app.config.admin.auth_failure_burst {
        assert_eq!(attempt("hg_wrong_token").await.unwrap().status(), 401);
    }
    let r = attempt("hg_wrong_token").await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(attempt(ACME_TOKEN).await.unwrap().status(), 429);
    // The admin API shares the count: it is one token space.
    let r = app
        .admin(Method::GET, ACME_TOKEN, "/events", None, None)
        .await;
    assert_eq!(r.status(), 429);
}

async fn headers_over_the_limit_get_431_and_store_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let max = app.config.server.max_header_bytes;
    assert_eq!(max, 32 * 1024, "the default");
    let body = r#"{"id":"evt_big_header","type":"t"}"#;
    let mut headers = stripe_headers(STRIPE_SECRET, now(), body.as_bytes());
    headers.push(("X-Padding".into(), "a".repeat(max)));
    let r = app.post_webhook("stripe", &headers, body.to_owned()).await;
    assert_eq!(error_code(r).await, (431, "headers_too_large".into()));
    assert_eq!(app.store.count_events().await.unwrap(), 0);
    // Under the limit, the same event is stored with its header.
    headers.last_mut().unwrap().1 = "a".repeat(max / 2);
    let r = app.post_webhook("stripe", &headers, body.to_owned()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

async fn metrics_can_have_their_own_address_and_a_token(backend: Backend) {
    let app = spawn_app_with(backend, |s, url| {
        s.metrics.listen = Some("127.0.0.1:0".into());
        s.metrics.token = Some("scrape-secret".to_owned().into());
        url.to_owned()
    })
    .await;
    let metrics = app.metrics_address.clone().expect("a metrics listener");
    let get = |url: String, token: Option<&'static str>| {
        let mut r = app.client.get(url);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    // Not on the main address, with or without the token.
    let r = get(app.url("/metrics"), Some("scrape-secret"))
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // On its own address, only with the token.
    assert_eq!(
        get(format!("{metrics}/metrics"), None)
            .await
            .unwrap()
            .status(),
        401
    );
    let r = get(format!("{metrics}/metrics"), Some("wrong"))
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = get(format!("{metrics}/metrics"), Some("scrape-secret"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("hookgate_"));
    // And nothing else is served there.
    let r = app
        .client
        .post(format!("{metrics}/webhooks/stripe"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(get(app.url("/healthz"), None).await.unwrap().status(), 200);
}
