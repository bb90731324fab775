//! Values a store cannot hold as text (a NUL): a validly signed event is stored with its type
//! made storable and its body exact, an unusable id is refused with 400, neither fails
//! anyone else's request, and both stores answer alike. Filters with a NUL are bad input.

use std::sync::Arc;

use crate::both_backends;
use crate::support::console::http_login;
use crate::support::signing::github_headers;
use crate::support::{error_code, spawn_app, Backend, ACME_TOKEN, DEFAULT_TOKEN, GITHUB_SECRET};

both_backends!(
    a_nul_in_the_type_is_stored_replaced_beside_other_sources_traffic,
    a_nul_in_the_event_id_is_refused_with_400,
    filters_with_a_nul_are_bad_requests,
);

async fn a_nul_in_the_type_is_stored_replaced_beside_other_sources_traffic(backend: Backend) {
    let app = Arc::new(spawn_app(backend).await);
    let mut tasks = Vec::new();
    for i in 0..300 {
        let valid = app.clone();
        tasks.push(tokio::spawn(async move {
            let app = valid;
            let body = format!(r#"{{"n":{i}}}"#).into_bytes();
            let headers = github_headers(GITHUB_SECRET, &format!("gh-valid-{i}"), &body);
            let r = app.post_webhook("github", &headers, body).await;
            ("valid", r.status().as_u16())
        }));
        if i % 10 == 0 {
            let app = app.clone();
            tasks.push(tokio::spawn(async move {
                let body = format!(r#"{{"id":"evt_nul_{i}","type":"invoice\u0000.paid"}}"#);
                ("nul type", app.post_stripe(&body).await.status().as_u16())
            }));
        }
    }
    for t in tasks {
        let (kind, status) = t.await.unwrap();
        assert_eq!(status, 200, "a {kind} request");
    }
    assert_eq!(app.store.count_events().await.unwrap(), 330);
    let stored = app
        .store
        .find_event("stripe", "evt_nul_0")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.event_type.as_deref(), Some("invoice\u{FFFD}.paid"));
    assert_eq!(
        stored.body, br#"{"id":"evt_nul_0","type":"invoice\u0000.paid"}"#,
        "the body keeps the exact bytes"
    );
}

async fn a_nul_in_the_event_id_is_refused_with_400(backend: Backend) {
    let app = spawn_app(backend).await;
    let r = app.post_stripe(r#"{"id":"evt_\u0000x","type":"t"}"#).await;
    assert_eq!(error_code(r).await, (400, "invalid_event_id".into()));
    // GitHub's id is a header, where HTTP allows no NUL; a tab is the control character
    // that gets through.
    let body = b"{}".to_vec();
    let headers = github_headers(GITHUB_SECRET, "gh\tx", &body);
    let r = app.post_webhook("github", &headers, body).await;
    assert_eq!(error_code(r).await, (400, "invalid_event_id".into()));
    assert_eq!(app.store.count_events().await.unwrap(), 0);
}

async fn filters_with_a_nul_are_bad_requests(backend: Backend) {
    let app = spawn_app(backend).await;
    app.ingest_stripe("evt_filter").await;
    for path in [
        "/events?event_type=a%00b",
        "/events?source=stripe%00",
        "/events?provider_event_id=%00",
        "/dead-letters?destination=billing%00",
    ] {
        let r = app
            .admin(reqwest::Method::GET, ACME_TOKEN, path, None, None)
            .await;
        assert_eq!(error_code(r).await, (400, "bad_request".into()), "{path}");
    }
    for (path, body) in [
        ("/replay", r#"{"source":"stripe","event_type":"a\u0000"}"#),
        ("/dead-letters/retry", r#"{"destination":"billing\u0000"}"#),
    ] {
        let r = app
            .admin(reqwest::Method::POST, ACME_TOKEN, path, Some(body), None)
            .await;
        assert_eq!(error_code(r).await, (400, "bad_request".into()), "{path}");
    }
    // The console's filter form too.
    let (client, session, _) = http_login(&app, DEFAULT_TOKEN).await;
    let r = client
        .get(app.url("/console/events?event_type=a%00b"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // And the gateway still serves.
    let listed = app.admin_json(ACME_TOKEN, "/events").await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 1);
}
