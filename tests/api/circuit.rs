//! A destination's circuit breaker (`[destinations.circuit]`): after `failures` failed
//! attempts in a row it trips, its jobs are held like a pause (their attempt counts do not
//! burn down), one probe delivery is tried after each cool-down, and a successful probe
//! closes it again.

use chrono::{Duration, Utc};
use hookgate::config::CircuitSettings;
use hookgate::queue::JobStatus;

use crate::both_backends;
use crate::support::sink::{Answer, Sink};
use crate::support::{spawn_app_with_sink, Backend, TestApp, ACME_TOKEN};

both_backends!(
    a_tripped_destination_holds_its_jobs_probes_after_each_cool_down_and_recovers,
    a_success_starts_the_failure_count_again,
);

/// Billing trips after 3 failures in a row, probes every minute, and takes one delivery at a
/// time (so each `run_once` makes exactly one billing attempt).
async fn app_with_breaker(backend: Backend, sink: &Sink) -> TestApp {
    spawn_app_with_sink(backend, sink, |s| {
        s.sources[0].destinations = vec!["billing".into()];
        let billing = s
            .destinations
            .iter_mut()
            .find(|d| d.name == "billing")
            .unwrap();
        billing.max_in_flight = 1;
        billing.circuit = Some(CircuitSettings {
            failures: 3,
            cool_down: "1m".into(),
        });
    })
    .await
}

async fn state(app: &TestApp) -> serde_json::Value {
    app.admin_json(ACME_TOKEN, "/destinations/billing").await
}

async fn a_tripped_destination_holds_its_jobs_probes_after_each_cool_down_and_recovers(
    backend: Backend,
) {
    let sink = Sink::start().await;
    sink.always("/billing", Answer::status(500));
    let app = app_with_breaker(backend, &sink).await;
    let events = app.ingest_stripes("evt_breaker", 6).await;
    for _ in 0..3 {
        app.worker().run_once().await.unwrap();
    }
    assert_eq!(sink.received("/billing").len(), 3);
    let tripped = state(&app).await;
    assert_eq!(tripped["state"], "tripped", "{tripped}");
    assert_eq!(tripped["failure_streak"], 3);

    // Held: no attempt, however often the worker looks, until the cool-down has passed.
    for _ in 0..3 {
        app.worker().run_once().await.unwrap();
    }
    let soon = Utc::now() + Duration::seconds(30);
    app.worker().run_once_at(soon).await.unwrap();
    assert_eq!(sink.received("/billing").len(), 3);
    for event in &events[3..] {
        let job = app.job(*event, "billing").await;
        assert_eq!((job.status, job.attempts), (JobStatus::Pending, 0), "held");
    }

    // One probe per cool-down: it fails, and the destination stays tripped.
    let first_probe = Utc::now() + Duration::seconds(61);
    for _ in 0..3 {
        app.worker().run_once_at(first_probe).await.unwrap();
    }
    assert_eq!(sink.received("/billing").len(), 4, "one probe");
    assert_eq!(state(&app).await["state"], "tripped");
    let held: Vec<i32> = billing_attempts(&app, &events).await;
    assert_eq!(held.iter().filter(|a| **a == 0).count(), 2, "{held:?}");

    // The receiver recovers; the next probe succeeds and everything goes out.
    sink.always("/billing", Answer::status(200));
    let second_probe = Utc::now() + Duration::seconds(125);
    for _ in 0..8 {
        app.worker().run_once_at(second_probe).await.unwrap();
    }
    assert_eq!(state(&app).await["state"], "active");
    for event in &events {
        assert_eq!(
            app.job(*event, "billing").await.status,
            JobStatus::Succeeded
        );
    }
    let attempts = billing_attempts(&app, &events).await;
    assert_eq!(
        attempts.iter().filter(|a| **a == 1).count(),
        2,
        "the held jobs were attempted once, after the recovery: {attempts:?}"
    );
}

/// Each event's billing attempts, in order.
async fn billing_attempts(app: &TestApp, events: &[hookgate::domain::EventId]) -> Vec<i32> {
    let mut attempts = Vec::new();
    for event in events {
        attempts.push(app.job(*event, "billing").await.attempts);
    }
    attempts
}

async fn a_success_starts_the_failure_count_again(backend: Backend) {
    let sink = Sink::start().await;
    sink.script(
        "/billing",
        &[
            Answer::status(500),
            Answer::status(500),
            Answer::status(200),
            Answer::status(500),
            Answer::status(500),
        ],
    );
    let app = app_with_breaker(backend, &sink).await;
    app.ingest_stripes("evt_streak", 5).await;
    for _ in 0..5 {
        app.worker().run_once().await.unwrap();
    }
    assert_eq!(sink.received("/billing").len(), 5);
    let shown = state(&app).await;
    assert_eq!(
        shown["state"], "active",
        "never three failures in a row: {shown}"
    );
    assert_eq!(shown["failure_streak"], 2);
}
