//! `/metrics` after a known sequence of requests: every counter exactly.

use crate::both_backends;
use crate::support::sink::{Answer, Sink};
use crate::support::{signing, spawn_app, spawn_app_with_sink, Backend, TestApp};
use chrono::{DateTime, TimeZone, Utc};
use hookgate::store::{AttemptOutcome, JobUpdate};
use std::time::Duration;

both_backends!(
    metrics_count_exactly_what_happened,
    delivery_lag_is_the_age_of_the_oldest_due_pending_job_over_all_destinations,
    the_job_gauge_counts_unfinished_jobs_by_status_and_destination,
);

async fn scrape(app: &TestApp) -> String {
    let r = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    r.text().await.unwrap()
}

/// The value of the sample whose name and labels are exactly `series`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

async fn metrics_count_exactly_what_happened(backend: Backend) {
    let sink = Sink::start().await;
    sink.always("/billing", Answer::status(500));
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    app.ingest_stripe("evt_m1").await;
    app.ingest_stripe("evt_m2").await;
    app.ingest_stripe("evt_m1").await; // duplicate
    let forged = signing::stripe_headers("whsec_wrong", signing::now(), b"{}");
    assert_eq!(
        app.post_webhook("stripe", &forged, "{}").await.status(),
        401
    );
    assert_eq!(app.post_webhook("nope", &forged, "{}").await.status(), 404);
    app.worker().run_once().await.unwrap();

    let text = scrape(&app).await;
    let expect = [
        (
            r#"hookgate_ingest_requests_total{outcome="accepted",reason="",source="stripe"}"#,
            2.0,
        ),
        (
            r#"hookgate_ingest_requests_total{outcome="duplicate",reason="",source="stripe"}"#,
            1.0,
        ),
        (
            r#"hookgate_ingest_requests_total{outcome="rejected",reason="invalid_signature",source="stripe"}"#,
            1.0,
        ),
        (
            r#"hookgate_ingest_requests_total{outcome="rejected",reason="unknown_source",source="_unknown"}"#,
            1.0,
        ),
        (
            r#"hookgate_ingest_duration_seconds_count{source="stripe"}"#,
            4.0,
        ),
        // Three verified events reached group commit, one after another: three batches.
        (r#"hookgate_ingest_batched_events_total"#, 3.0),
        (r#"hookgate_ingest_batches_total"#, 3.0),
        (
            r#"hookgate_delivery_attempts_total{destination="audit",outcome="succeeded"}"#,
            2.0,
        ),
        (
            r#"hookgate_delivery_attempts_total{destination="billing",outcome="retry"}"#,
            2.0,
        ),
        (
            r#"hookgate_delivery_duration_seconds_count{destination="billing"}"#,
            2.0,
        ),
        (
            r#"hookgate_jobs{destination="billing",status="pending"}"#,
            2.0,
        ),
        (r#"hookgate_delivery_lag_seconds"#, 0.0),
        (
            r#"hookgate_reconciler_repairs_total{kind="expired_lease"}"#,
            0.0,
        ),
    ];
    for (series, want) in expect {
        assert_eq!(value(&text, series), Some(want), "{series}\n{text}");
    }
    assert!(
        value(
            &text,
            r#"hookgate_jobs{destination="audit",status="succeeded"}"#
        )
        .is_none(),
        "succeeded jobs are not gauged"
    );
    assert!(value(&text, r#"hookgate_db_pool_connections{state="max"}"#).unwrap() >= 1.0);

    // A crashed worker's lease, repaired by the reconciler, is counted.
    let doomed = app.worker();
    doomed
        .crash_points()
        .arm(hookgate::worker::CrashPoint::AfterClaim, 1);
    app.ingest_stripe("evt_m3").await;
    doomed.run_once().await.unwrap();
    app.reconciler()
        .sweep_at(chrono::Utc::now() + chrono::Duration::seconds(31))
        .await
        .unwrap();
    let text = scrape(&app).await;
    assert_eq!(
        value(
            &text,
            r#"hookgate_reconciler_repairs_total{kind="expired_lease"}"#
        ),
        Some(1.0)
    );
    // Two jobs from evt_m1/evt_m2 retry in 5 s and are not due; evt_m3's were repaired due now.
    assert!(value(&text, "hookgate_delivery_lag_seconds").unwrap() >= 0.0);
}

/// Stores one event with a job for `destination`, due at `received_at`.
async fn queue_job(app: &TestApp, destination: &str, received_at: DateTime<Utc>) {
    let tenant = hookgate::domain::Name::parse("tenant", "acme").unwrap();
    let source = hookgate::domain::Name::parse("source", "stripe").unwrap();
    let pid = hookgate::domain::ProviderEventId::parse(&uuid::Uuid::now_v7().to_string()).unwrap();
    let destinations = [hookgate::domain::Name::parse("destination", destination).unwrap()];
    app.store
        .insert_event(&hookgate::store::NewEvent {
            received_at,
            destinations: &destinations,
            ..crate::support::new_event(&tenant, &source, &pid, b"{}")
        })
        .await
        .unwrap();
}

/// The gauge reads the index one destination at a time; the oldest due job may sit under
/// any of them, and jobs not pending or not yet due do not count.
async fn delivery_lag_is_the_age_of_the_oldest_due_pending_job_over_all_destinations(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    // Whole milliseconds, which is what SQLite keeps.
    let now = Utc
        .timestamp_millis_opt(Utc::now().timestamp_millis())
        .unwrap();
    let ago = |s: i64| now - chrono::Duration::seconds(s);
    assert_eq!(app.store.delivery_lag(now).await.unwrap(), Duration::ZERO);

    queue_job(&app, "alpha", ago(10)).await;
    queue_job(&app, "alpha", ago(3)).await;
    queue_job(&app, "mid", ago(40)).await;
    queue_job(&app, "mid", ago(-60)).await; // not yet due
    queue_job(&app, "zulu", ago(25)).await;
    queue_job(&app, "zulu", ago(-600)).await; // not yet due
    queue_job(&app, "claimed", ago(900)).await;
    let lease = now + chrono::Duration::seconds(30);
    let claimed = app
        .store
        .claim_jobs("claimed", 10, now, lease)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);

    assert_eq!(
        app.store.delivery_lag(now).await.unwrap(),
        Duration::from_secs(40)
    );
    // With mid's due job claimed, the oldest is zulu's, the last destination in order.
    assert_eq!(
        app.store
            .claim_jobs("mid", 10, now, lease)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        app.store.delivery_lag(now).await.unwrap(),
        Duration::from_secs(25)
    );
    // Later, mid's other job is due too and is the oldest of all.
    let later = now + chrono::Duration::seconds(100);
    assert_eq!(
        app.store.delivery_lag(later).await.unwrap(),
        Duration::from_secs(125)
    );
    // The scrape reports the same gauge.
    let text = scrape(&app).await;
    let lag = value(&text, "hookgate_delivery_lag_seconds").unwrap();
    assert!((25.0..35.0).contains(&lag), "{lag}\n{text}");
}

/// Ends a claimed job as a worker would.
async fn finish(app: &TestApp, job: &hookgate::store::ClaimedJob, update: JobUpdate) {
    let now = Utc::now();
    let record = hookgate::store::AttemptRecord {
        attempt: job.attempt,
        worker_id: "test".into(),
        started_at: now,
        duration_ms: 1,
        status_code: Some(500),
        error: None,
        outcome: match update {
            JobUpdate::Succeeded => AttemptOutcome::Succeeded,
            JobUpdate::Retry { .. } => AttemptOutcome::Retry,
            JobUpdate::Failed => AttemptOutcome::Failed,
        },
    };
    let applied = app
        .store
        .finish_job(job.job_id, job.claim_token, update, &record, now)
        .await
        .unwrap();
    assert!(applied);
}

/// Each status is counted from its own index; succeeded and discarded jobs are not counted.
async fn the_job_gauge_counts_unfinished_jobs_by_status_and_destination(backend: Backend) {
    let app = spawn_app(backend).await;
    let now = Utc::now();
    let lease = now + chrono::Duration::seconds(30);
    for _ in 0..3 {
        queue_job(&app, "alpha", now).await;
        queue_job(&app, "beta", now).await;
    }
    let alpha = app.store.claim_jobs("alpha", 1, now, lease).await.unwrap();
    finish(&app, &alpha[0], JobUpdate::Succeeded).await;
    let beta = app.store.claim_jobs("beta", 3, now, lease).await.unwrap();
    assert_eq!(beta.len(), 3);
    finish(&app, &beta[0], JobUpdate::Failed).await;
    finish(&app, &beta[1], JobUpdate::Failed).await;
    assert!(app
        .store
        .discard_dead_letter(beta[1].job_id, "acme", now)
        .await
        .unwrap());

    let mut counts = app.store.count_jobs_by_status().await.unwrap();
    counts.sort();
    let expect = [
        ("failed", "beta", 1),
        ("in_progress", "beta", 1),
        ("pending", "alpha", 2),
    ];
    let expect: Vec<_> = expect
        .iter()
        .map(|&(s, d, n)| (s.to_owned(), d.to_owned(), n))
        .collect();
    assert_eq!(counts, expect);
    let text = scrape(&app).await;
    for (status, destination, n) in expect {
        let series = format!(r#"hookgate_jobs{{destination="{destination}",status="{status}"}}"#);
        assert_eq!(value(&text, &series), Some(n as f64), "{series}\n{text}");
    }
}
