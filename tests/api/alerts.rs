//! `[alerts] destination = "audit"`: operational events stored as events of the source
//! `hookgate-alerts` and delivered to the alerts destination like any forward, each at most
//! once per subject and time window, never about the alerts destination itself.

use std::time::Duration as StdDuration;

use chrono::{Duration, Utc};
use hookgate::config::{AlertsSettings, CircuitSettings, Settings};
use reqwest::Method;
use serde_json::Value;

use crate::both_backends;
use crate::support::sink::{Answer, Sink};
use crate::support::{signing, spawn_app_with_sink, Backend, TestApp, ACME_TOKEN};

both_backends!(
    a_trip_and_a_recovery_are_alerted_and_delivered_signed,
    dead_letters_are_alerted_once_a_minute_with_a_count_never_about_the_alerts_destination,
    a_lagging_destination_is_alerted_once_per_window,
    a_source_s_rejections_over_the_threshold_are_alerted_once_a_minute,
);

/// Stripe events go to billing; alerts to audit, for tenant acme.
fn with_alerts(s: &mut Settings) {
    s.sources[0].destinations = vec!["billing".into()];
    s.alerts = AlertsSettings {
        destination: Some("audit".into()),
        tenant: "acme".into(),
        max_lag: "10m".into(),
        rejections_per_minute: 3,
    };
}

/// The alerts stored so far, as (type, body), oldest first.
async fn alerts(app: &TestApp) -> Vec<(String, Value)> {
    let page = app
        .admin_json(ACME_TOKEN, "/events?source=hookgate-alerts")
        .await;
    let mut found = Vec::new();
    for e in page["data"].as_array().unwrap().iter().rev() {
        let id = e["id"].as_str().unwrap();
        let detail = app.admin_json(ACME_TOKEN, &format!("/events/{id}")).await;
        let body: Value = serde_json::from_str(detail["body"].as_str().unwrap()).unwrap();
        found.push((e["event_type"].as_str().unwrap().to_owned(), body));
    }
    found
}

fn kinds(found: &[(String, Value)]) -> Vec<&str> {
    found.iter().map(|(k, _)| k.as_str()).collect()
}

async fn a_trip_and_a_recovery_are_alerted_and_delivered_signed(backend: Backend) {
    let sink = Sink::start().await;
    sink.always("/billing", Answer::status(500));
    let app = spawn_app_with_sink(backend, &sink, |s| {
        with_alerts(s);
        let billing = s
            .destinations
            .iter_mut()
            .find(|d| d.name == "billing")
            .unwrap();
        billing.circuit = Some(CircuitSettings {
            failures: 2,
            cool_down: "1m".into(),
        });
    })
    .await;
    app.ingest_stripes("evt_alert_trip", 2).await;
    app.worker().run_once().await.unwrap();
    let found = alerts(&app).await;
    assert_eq!(kinds(&found), ["destination.tripped"]);
    assert_eq!(found[0].1["destination"], "billing");
    app.worker().run_once().await.unwrap();
    let delivered = sink.received("/audit");
    assert_eq!(
        delivered.len(),
        1,
        "the alert is delivered like any forward"
    );
    assert!(!delivered[0].header("webhook-signature").is_empty());
    let body: Value = serde_json::from_slice(&delivered[0].body).unwrap();
    assert_eq!(body["type"], "destination.tripped");

    sink.always("/billing", Answer::status(200));
    app.worker()
        .run_once_at(Utc::now() + Duration::seconds(61))
        .await
        .unwrap();
    assert_eq!(
        kinds(&alerts(&app).await),
        ["destination.tripped", "destination.recovered"]
    );
}

async fn dead_letters_are_alerted_once_a_minute_with_a_count_never_about_the_alerts_destination(
    backend: Backend,
) {
    let sink = Sink::start().await;
    sink.always("/billing", Answer::status(410));
    sink.always("/audit", Answer::status(410));
    let app = spawn_app_with_sink(backend, &sink, with_alerts).await;
    app.ingest_stripes("evt_alert_dead", 3).await;
    app.worker().run_once().await.unwrap();
    let reconciler = app.reconciler();
    reconciler
        .sweep_at(Utc::now() + Duration::minutes(2))
        .await
        .unwrap();
    let found = alerts(&app).await;
    assert_eq!(kinds(&found), ["job.dead_lettered"]);
    assert_eq!(
        (&found[0].1["destination"], &found[0].1["count"]),
        (&"billing".into(), &3.into())
    );

    // The alert's own delivery to audit dead-letters too: no alert about that.
    app.worker()
        .run_once_at(Utc::now() + Duration::minutes(3))
        .await
        .unwrap();
    assert_eq!(sink.received("/audit").len(), 1);
    reconciler
        .sweep_at(Utc::now() + Duration::minutes(4))
        .await
        .unwrap();
    app.reconciler()
        .sweep_at(Utc::now() + Duration::minutes(4))
        .await
        .unwrap();
    assert_eq!(kinds(&alerts(&app).await), ["job.dead_lettered"]);
}

async fn a_lagging_destination_is_alerted_once_per_window(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, with_alerts).await;
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
    app.ingest_stripe("evt_alert_lag").await;
    let early = Utc::now() + Duration::minutes(5);
    app.reconciler().sweep_at(early).await.unwrap();
    assert!(alerts(&app).await.is_empty(), "under max_lag");
    let late = Utc::now() + Duration::minutes(11);
    app.reconciler().sweep_at(late).await.unwrap();
    app.reconciler().sweep_at(late).await.unwrap();
    let found = alerts(&app).await;
    assert_eq!(kinds(&found), ["delivery.lagging"]);
    assert_eq!(found[0].1["destination"], "billing");
    assert!(found[0].1["oldest_due_seconds"].as_i64().unwrap() >= 600);
}

async fn a_source_s_rejections_over_the_threshold_are_alerted_once_a_minute(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, with_alerts).await;
    let body = r#"{"id":"evt_forged","type":"invoice.paid"}"#;
    let forged = signing::stripe_headers("whsec_wrong", signing::now(), body.as_bytes());
    for _ in 0..4 {
        let r = app.post_webhook("stripe", &forged, body.to_owned()).await;
        assert_eq!(r.status(), 401);
    }
    // Raised in the background: wait for it, bounded.
    let deadline = std::time::Instant::now() + StdDuration::from_secs(10);
    let found = loop {
        let found = alerts(&app).await;
        if !found.is_empty() || std::time::Instant::now() > deadline {
            break found;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(kinds(&found), ["source.rejections"]);
    assert_eq!(found[0].1["source"], "stripe");
    assert_eq!(found[0].1["rejected_at_least"], 3);
}
