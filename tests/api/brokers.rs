//! Broker destinations against the machine's real NATS JetStream and RabbitMQ (and, for the
//! restart tests, brokers of the test's own): each event lands once, a republish is absorbed
//! by the stable delivery id, a replay publishes again under a new one, and a broker that
//! fails, refuses or restarts costs retries, never messages.

mod nats;
mod rabbitmq;

use std::collections::BTreeSet;
use std::time::Duration;

use hookgate::config::{DestinationSettings, Settings};
use hookgate::domain::EventId;
use hookgate::queue::JobStatus;

use crate::support::brokers::BrokerMessage;
use crate::support::{spawn_app_with, Backend, TestApp};

/// An app whose `stripe` source routes to `destination` alone (named `bus`).
async fn app_with(backend: Backend, destination: DestinationSettings) -> TestApp {
    app_with_adjusted(backend, destination, |_| {}).await
}

async fn app_with_adjusted(
    backend: Backend,
    destination: DestinationSettings,
    adjust: impl FnOnce(&mut Settings),
) -> TestApp {
    spawn_app_with(backend, move |s, url| {
        s.destinations.push(destination);
        s.sources.retain(|src| src.name == "stripe");
        s.sources[0].destinations = vec!["bus".into()];
        adjust(s);
        url.to_owned()
    })
    .await
}

/// Runs workers until every job of the app has succeeded, at most `rounds` times. Each round
/// takes the clock a second ahead, so the destinations' 100 ms retries are due at once and
/// no round waits for one.
async fn deliver_all(app: &TestApp, jobs: usize, rounds: usize) {
    for _ in 0..rounds {
        let ahead = chrono::Utc::now() + chrono::Duration::seconds(1);
        app.worker().run_once_at(ahead).await.unwrap();
        if app.store.count_jobs(JobStatus::Succeeded).await.unwrap() as usize >= jobs {
            return;
        }
    }
    let done = app.store.count_jobs(JobStatus::Succeeded).await.unwrap();
    panic!("{done} of {jobs} jobs delivered after {rounds} rounds");
}

/// Waits until `count` jobs have succeeded (a running worker delivers them).
async fn succeeded(app: &TestApp, count: usize, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let done = app.store.count_jobs(JobStatus::Succeeded).await.unwrap() as usize;
        if done >= count {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            let failed = app.store.count_jobs(JobStatus::Failed).await.unwrap();
            panic!("{done} of {count} jobs delivered after {within:?}, {failed} dead letters");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The event ids the messages carry, checking that each id arrived under one delivery id
/// only: what a consumer deduplicating on the delivery id would keep.
fn event_ids(messages: &[BrokerMessage], delivery_id_header: &str) -> BTreeSet<String> {
    let mut by_delivery = std::collections::BTreeMap::new();
    for m in messages {
        let event = m.header("hookgate-event-id").to_owned();
        let delivery = m.header(delivery_id_header).to_owned();
        let previous = by_delivery.insert(delivery.clone(), event.clone());
        assert!(
            previous.is_none_or(|p| p == event),
            "delivery id {delivery} carried two events"
        );
    }
    by_delivery.into_values().collect()
}

fn ids(events: &[EventId]) -> BTreeSet<String> {
    events.iter().map(ToString::to_string).collect()
}

/// A time past every lease taken now.
fn after_lease(app: &TestApp) -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
        + chrono::Duration::from_std(app.config.worker.lease).unwrap()
        + chrono::Duration::seconds(1)
}

/// Ingests `count` Stripe events from a task of its own, one at a time, while the test goes
/// on; returns their ids when done.
fn ingest_in_background(
    app: &TestApp,
    prefix: &'static str,
    count: usize,
) -> tokio::task::JoinHandle<Vec<EventId>> {
    let (client, url) = (app.client.clone(), app.url("/webhooks/stripe"));
    tokio::spawn(async move {
        let mut ids = Vec::with_capacity(count);
        for i in 0..count {
            let body = format!(r#"{{"id":"{prefix}_{i}","type":"invoice.paid"}}"#);
            let headers = crate::support::signing::stripe_headers(
                crate::support::STRIPE_SECRET,
                crate::support::signing::now(),
                body.as_bytes(),
            );
            let mut request = client.post(&url).body(body);
            for (name, value) in &headers {
                request = request.header(name.as_str(), value.as_str());
            }
            let r = request.send().await.unwrap();
            assert_eq!(r.status(), 200);
            let json: serde_json::Value = r.json().await.unwrap();
            ids.push(EventId::parse(json["id"].as_str().unwrap()).unwrap());
        }
        ids
    })
}

/// `/readyz` as JSON, expecting 200.
async fn readyz(app: &TestApp) -> serde_json::Value {
    let r = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// `POST /admin/v1/events/{event}/replay`, expecting 202.
async fn replay(app: &TestApp, event: EventId) {
    let r = app
        .admin(
            reqwest::Method::POST,
            crate::support::ACME_TOKEN,
            &format!("/events/{event}/replay"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status(), 202);
}
