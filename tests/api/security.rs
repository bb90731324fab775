//! Ingress limits and what an admin cannot do: reach destinations the config does not route.

use reqwest::Method;

use crate::both_backends;
use crate::support::sink::Sink;
use crate::support::{error_code, spawn_app_with, spawn_app_with_sink, Backend, ACME_TOKEN};

both_backends!(
    a_source_over_its_rate_limit_gets_429,
    admin_calls_cannot_reach_unrouted_destinations,
);

async fn a_source_over_its_rate_limit_gets_429(backend: Backend) {
    let app = spawn_app_with(backend, |s, url| {
        let stripe = s.sources.iter_mut().find(|s| s.name == "stripe").unwrap();
        stripe.rate_limit_per_second = Some(1);
        stripe.rate_limit_burst = Some(2);
        url.to_owned()
    })
    .await;
    for i in 0..2 {
        let r = app.post_stripe(&format!(r#"{{"id":"evt_rl_{i}"}}"#)).await;
        assert_eq!(r.status(), 200, "within the burst");
    }
    let r = app.post_stripe(r#"{"id":"evt_rl_2"}"#).await;
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(error_code(r).await, (429, "rate_limited".into()));
    assert_eq!(app.store.count_events().await.unwrap(), 2);
    // Other sources have their own (here: no) limit.
    let body = b"{}";
    let headers =
        crate::support::signing::github_headers(crate::support::GITHUB_SECRET, "rl-gh", body);
    let r = app.post_webhook("github", &headers, body.to_vec()).await;
    assert_eq!(r.status(), 200);
}

async fn admin_calls_cannot_reach_unrouted_destinations(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let event = app.ingest_stripe("evt_routes").await;
    // A destination of another source, an unknown one, and a URL: all refused.
    for destinations in [r#"["elsewhere"]"#, r#"["http://evil.example/"]"#] {
        let body = format!(r#"{{"destinations":{destinations}}}"#);
        let r = app
            .admin(
                Method::POST,
                ACME_TOKEN,
                &format!("/events/{event}/replay"),
                Some(&body),
                None,
            )
            .await;
        assert_eq!(
            error_code(r).await,
            (422, "unprocessable".into()),
            "{destinations}"
        );
    }
    // No field can carry a URL or define a destination: unknown fields are rejected.
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/events/{event}/replay"),
            Some(r#"{"url":"http://evil.example/"}"#),
            None,
        )
        .await;
    assert_eq!(error_code(r).await, (400, "bad_request".into()));
    // No route creates or edits a destination: the destination paths read, pause and
    // resume only.
    for (method, path) in [
        (Method::POST, "/destinations"),
        (Method::PUT, "/destinations/billing"),
        (Method::PATCH, "/destinations/billing"),
    ] {
        let r = app
            .admin(
                method,
                ACME_TOKEN,
                path,
                Some(r#"{"url":"http://evil.example/"}"#),
                None,
            )
            .await;
        assert_eq!(error_code(r).await.0, 405, "{path}");
    }
    assert_eq!(
        app.store.jobs_for_event(event).await.unwrap().len(),
        2,
        "nothing queued"
    );
}
