//! `GET /admin/v1/undelivered` and `POST /admin/v1/undelivered/retry`: every job that has not
//! succeeded and is not simply waiting for its first attempt, with its reason; and a retry of
//! them that leaves held jobs to their destination.

use reqwest::Method;
use serde_json::Value;

use crate::both_backends;
use crate::support::sink::{Answer, Sink};
use crate::support::{spawn_app_with_sink, Backend, TestApp, ACME_TOKEN};
use hookgate::queue::JobStatus;

both_backends!(undelivered_lists_each_reason_and_retries_what_is_not_held,);

/// (provider event id, destination, reason) of each listed job, sorted.
async fn listed(app: &TestApp, query: &str) -> Vec<(String, String, String)> {
    let page: Value = app
        .admin_json(ACME_TOKEN, &format!("/undelivered{query}"))
        .await;
    let mut rows: Vec<(String, String, String)> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["event"]["provider_event_id"].as_str().unwrap().to_owned(),
                u["destination"].as_str().unwrap().to_owned(),
                u["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    rows.sort();
    rows
}

fn row(event: &str, destination: &str, reason: &str) -> (String, String, String) {
    (event.into(), destination.into(), reason.into())
}

async fn undelivered_lists_each_reason_and_retries_what_is_not_held(backend: Backend) {
    let sink = Sink::start().await;
    sink.always("/billing", Answer::status(500));
    sink.always("/audit", Answer::status(410));
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let first = app.ingest_stripe("evt_u1").await;
    app.worker().run_once().await.unwrap();
    assert_eq!(
        listed(&app, "").await,
        [
            row("evt_u1", "audit", "dead_letter"),
            row("evt_u1", "billing", "retrying")
        ]
    );

    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/destinations/billing/pause",
            None,
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    let second = app.ingest_stripe("evt_u2").await;
    let all = [
        row("evt_u1", "audit", "dead_letter"),
        row("evt_u1", "billing", "paused"),
        row("evt_u2", "billing", "paused"),
    ];
    assert_eq!(
        listed(&app, "").await,
        all,
        "evt_u2's audit job is only waiting"
    );
    assert_eq!(listed(&app, "?destination=audit").await, all[..1]);
    assert_eq!(listed(&app, "?source=github").await, []);
    let received = app
        .store
        .get_event(second)
        .await
        .unwrap()
        .unwrap()
        .received_at;
    let since = received.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let query = format!("?since={}", since.replace('+', "%2B"));
    assert_eq!(listed(&app, &query).await, all[2..], "{query}");
    let page: Value = app.admin_json(ACME_TOKEN, "/undelivered?limit=2").await;
    assert_eq!(page["data"].as_array().unwrap().len(), 2);
    assert!(page["next_cursor"].is_string());

    sink.always("/audit", Answer::status(200));
    let retry = || {
        app.admin(
            Method::POST,
            ACME_TOKEN,
            "/undelivered/retry",
            Some("{}"),
            Some("retry-undelivered-1"),
        )
    };
    let r = retry().await;
    assert_eq!(r.status(), 202);
    assert_eq!(
        r.json::<Value>().await.unwrap()["retried"],
        1,
        "the dead letter only"
    );
    let again = retry().await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let audit = app.job(first, "audit").await;
    assert_eq!((audit.status, audit.attempts), (JobStatus::Pending, 0));
    let held = app.job(first, "billing").await;
    assert_eq!(
        (held.status, held.attempts),
        (JobStatus::Pending, 1),
        "held, untouched"
    );

    let null = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/undelivered/retry",
            Some("null"),
            None,
        )
        .await;
    assert_eq!(
        null.status(),
        202,
        "null is no filter, as the document allows"
    );

    app.worker().run_once().await.unwrap();
    assert_eq!(app.job(first, "audit").await.status, JobStatus::Succeeded);
    assert_eq!(
        listed(&app, "").await,
        [
            row("evt_u1", "billing", "paused"),
            row("evt_u2", "billing", "paused")
        ]
    );
}
