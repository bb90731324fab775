//! Destination control: `GET /admin/v1/destinations[/{name}]`, and pause and resume. A paused
//! destination's jobs are held in every process and across a restart (not claimed, not
//! failed, not expired), new events still queue for it, and on resume everything is
//! delivered, oldest first.

use chrono::{Duration, Utc};
use reqwest::Method;
use serde_json::Value;

use crate::both_backends;
use crate::support::sink::{Answer, Sink};
use crate::support::{
    error_code, spawn_app_with_sink, Backend, TestApp, ACME_TOKEN, DEFAULT_TOKEN,
};
use hookgate::queue::JobStatus;

both_backends!(
    a_paused_destination_loses_nothing_across_a_restart_and_delivers_everything_on_resume,
    a_paused_destination_is_not_handed_jobs_at_ingest,
    destinations_show_their_queue_success_rate_and_failure_streak,
    destinations_are_scoped_to_the_tenant_s_sources,
    the_console_charts_deliveries_success_lag_and_ingest,
);

async fn post(app: &TestApp, path: &str, key: Option<&str>) -> reqwest::Response {
    app.admin(Method::POST, ACME_TOKEN, path, None, key).await
}

async fn destination(app: &TestApp, name: &str) -> Value {
    app.admin_json(ACME_TOKEN, &format!("/destinations/{name}"))
        .await
}

/// The provider event ids the sink received at `path`, in order.
fn delivered(sink: &Sink, path: &str) -> Vec<String> {
    sink.received(path)
        .iter()
        .map(|r| r.header("hookgate-provider-event-id").to_owned())
        .collect()
}

async fn a_paused_destination_loses_nothing_across_a_restart_and_delivers_everything_on_resume(
    backend: Backend,
) {
    let sink = Sink::start().await;
    // One billing delivery at a time, so the order they arrive in is the order of claims.
    let app = spawn_app_with_sink(backend, &sink, |s| {
        s.destinations.iter_mut().for_each(|d| d.max_in_flight = 1);
    })
    .await;
    let r = post(&app, "/destinations/billing/pause", Some("pause-1")).await;
    assert_eq!(r.status(), 200);
    let paused: Value = r.json().await.unwrap();
    assert_eq!(paused["state"], "paused");
    let again = post(&app, "/destinations/billing/pause", Some("pause-1")).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json::<Value>().await.unwrap(), paused);

    let events = app.ingest_stripes("evt_held", 3).await;
    for _ in 0..3 {
        app.worker().run_once().await.unwrap();
    }
    assert_eq!(
        delivered(&sink, "/audit").len(),
        3,
        "other destinations go on"
    );
    assert!(sink.received("/billing").is_empty());
    // Days later, with the reconciler's sweeps, the held jobs are untouched.
    let later = Utc::now() + Duration::days(2);
    app.worker().run_once_at(later).await.unwrap();
    app.reconciler().sweep_at(later).await.unwrap();
    for event in &events {
        let job = app.job(*event, "billing").await;
        assert_eq!((job.status, job.attempts), (JobStatus::Pending, 0));
    }
    let shown = destination(&app, "billing").await;
    assert_eq!(
        (shown["state"].as_str(), shown["jobs_due"].as_i64()),
        (Some("paused"), Some(3))
    );

    let app = app.restart().await;
    let after_restart = app.ingest_stripe("evt_held_3").await;
    app.worker().run_once().await.unwrap();
    assert!(
        sink.received("/billing").is_empty(),
        "still paused after the restart"
    );
    assert_eq!(destination(&app, "billing").await["state"], "paused");

    let r = post(&app, "/destinations/billing/resume", Some("resume-1")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["state"], "active");
    for _ in 0..4 {
        app.worker().run_once().await.unwrap();
    }
    assert_eq!(
        delivered(&sink, "/billing"),
        ["evt_held_0", "evt_held_1", "evt_held_2", "evt_held_3"],
        "everything, oldest first"
    );
    let job = app.job(after_restart, "billing").await;
    assert_eq!((job.status, job.attempts), (JobStatus::Succeeded, 1));
    assert_eq!(destination(&app, "billing").await["state"], "active");
}

/// Ingest hands new jobs to its own process's workers when they have room; not a paused
/// destination's, which wait in the queue like any held job.
async fn a_paused_destination_is_not_handed_jobs_at_ingest(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let worker = app.worker();
    app.batcher.hand_off_to(worker.handoff());
    worker.run_once().await.unwrap();
    post(&app, "/destinations/billing/pause", None).await;
    worker.run_once().await.unwrap();

    let event = app.ingest_stripe("evt_not_handed").await;
    assert_eq!(app.job(event, "billing").await.status, JobStatus::Pending);
    assert_eq!(
        app.job(event, "audit").await.status,
        JobStatus::InProgress,
        "handed off"
    );
    worker.run_once().await.unwrap();
    assert!(sink.received("/billing").is_empty());
    assert_eq!(sink.received("/audit").len(), 1);

    post(&app, "/destinations/billing/resume", None).await;
    worker.run_once().await.unwrap();
    assert_eq!(delivered(&sink, "/billing"), ["evt_not_handed"]);
}

async fn destinations_show_their_queue_success_rate_and_failure_streak(backend: Backend) {
    let sink = Sink::start().await;
    sink.always("/billing", Answer::status(500));
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    app.ingest_stripes("evt_stats", 2).await;
    app.worker().run_once().await.unwrap();

    let list = app.admin_json(ACME_TOKEN, "/destinations").await;
    let names: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["audit", "billing"]);
    let audit = &list["data"][0];
    assert_eq!(audit["state"], "active");
    assert_eq!(audit["recent_attempts"], 2);
    assert_eq!(audit["recent_success_rate"], 1.0);
    assert_eq!(
        (audit["failure_streak"].as_i64(), audit["jobs_due"].as_i64()),
        (Some(0), Some(0))
    );

    let billing = &list["data"][1];
    assert_eq!(billing["recent_attempts"], 2);
    assert_eq!(billing["recent_successes"], 0);
    assert_eq!(billing["recent_success_rate"], 0.0);
    assert_eq!(billing["failure_streak"], 2);
    assert_eq!(billing["jobs_due"], 0, "the retries are not due yet");
    // Once due, the retries count as due, the oldest for as long as it has been due.
    let later = Utc::now() + Duration::hours(1);
    let due = app
        .store
        .destination_stats("billing", "acme", later - Duration::hours(1), later)
        .await
        .unwrap();
    assert_eq!(due.jobs_due, 2);
    assert!(due.oldest_due_at.unwrap() <= later);
}

async fn destinations_are_scoped_to_the_tenant_s_sources(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| {
        // Only the `default` tenant's sources route to audit now.
        s.sources[0].destinations = vec!["billing".into()];
    })
    .await;
    let acme = app.admin_json(ACME_TOKEN, "/destinations").await;
    assert_eq!(acme["data"].as_array().unwrap().len(), 1);
    let r = app
        .admin(Method::GET, ACME_TOKEN, "/destinations/audit", None, None)
        .await;
    assert_eq!(error_code(r).await, (404, "not_found".to_owned()));
    let r = post(&app, "/destinations/audit/pause", None).await;
    assert_eq!(error_code(r).await, (404, "not_found".to_owned()));
    assert!(app.store.held_destinations().await.unwrap().is_empty());
    let r = app
        .admin(
            Method::POST,
            DEFAULT_TOKEN,
            "/destinations/audit/pause",
            None,
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(app.store.held_destinations().await.unwrap(), ["audit"]);
}

/// The last hour per minute: deliveries and their success rate per destination, the oldest
/// due job's age as the reconciler samples it, and ingest per source; drawn as SVG bars.
async fn the_console_charts_deliveries_success_lag_and_ingest(backend: Backend) {
    let sink = Sink::start().await;
    sink.script("/billing", &[Answer::status(500)]);
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    app.ingest_stripes("evt_chart", 3).await;
    app.worker().run_once().await.unwrap();
    let r = post(&app, "/destinations/audit/pause", None).await;
    assert_eq!(r.status(), 200);
    app.ingest_stripe("evt_chart_held").await;
    let later = Utc::now() + Duration::seconds(90);
    app.reconciler().sweep_at(later).await.unwrap();

    let since = Utc::now() - Duration::minutes(59);
    let minutes = app
        .store
        .delivery_minutes("billing", "acme", since, 60)
        .await
        .unwrap();
    let (attempts, successes) = minutes.iter().fold((0, 0), |(a, s), (x, y)| (a + x, s + y));
    assert_eq!((attempts, successes), (3, 2));
    let ingest = app.store.ingest_minutes("acme", since, 60).await.unwrap();
    assert_eq!(ingest["stripe"].iter().sum::<i64>(), 4);
    let lag = app.store.destination_lag("audit", since, 62).await.unwrap();
    let sampled: Vec<i64> = lag.into_iter().flatten().collect();
    assert_eq!(sampled.len(), 1, "one sample");
    assert!(
        sampled[0] >= 89,
        "the held job has waited 90 s by then: {sampled:?}"
    );

    let (client, session, _) = crate::support::console::http_login(&app, ACME_TOKEN).await;
    let get = |path: &'static str| client.get(app.url(path)).header("cookie", &session).send();
    let html = get("/console/destinations")
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for chart in [
        "deliveries-billing",
        "success-billing",
        "lag-billing",
        "lag-audit",
    ] {
        assert!(
            html.contains(&format!(r#"id="{chart}""#)),
            "{chart}: {html}"
        );
    }
    let billing = html.split(r#"id="deliveries-billing""#).nth(1).unwrap();
    let billing = billing.split("</figure>").next().unwrap();
    let drawn: f64 = billing
        .split("<title>")
        .skip(1)
        .map(|t| t.split('<').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(drawn, 3.0, "the bars hold the three attempts: {billing}");
    let html = get("/console/events").await.unwrap().text().await.unwrap();
    assert!(html.contains(r#"id="ingest-stripe""#), "{html}");
    assert!(!html.contains("<script"));
}
