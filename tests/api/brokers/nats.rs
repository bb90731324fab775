//! `kind = "nats"`: JetStream publishes, done on the stream's acknowledgement.

use std::time::Duration;

use hookgate::domain::EventId;
use hookgate::queue::JobStatus;
use hookgate::worker::CrashPoint;
use reqwest::Method;

use super::{
    after_lease, app_with, app_with_adjusted, deliver_all, event_ids, ids, ingest_in_background,
    readyz, replay, succeeded,
};
use crate::both_backends;
use crate::support::broker_servers::NatsServer;
use crate::support::brokers::{nats_destination, TestStream, NATS_URL};
use crate::support::{Backend, ACME_TOKEN};

both_backends!(
    each_event_lands_on_the_stream_once_with_its_headers,
    a_republish_after_a_crash_is_absorbed_by_the_duplicate_window,
    a_replay_publishes_again_under_a_new_delivery_id,
    a_subject_the_stream_does_not_take_is_a_retryable_failure,
    a_server_killed_mid_stream_loses_nothing_and_duplicates_nothing,
    a_broker_destination_pauses_trips_and_dead_letters_like_any_other,
    a_signing_secret_signs_each_message_as_http_deliveries_are_signed,
);

async fn each_event_lands_on_the_stream_once_with_its_headers(backend: Backend) {
    let stream = TestStream::create(NATS_URL).await;
    let app = app_with(
        backend,
        nats_destination(
            "bus",
            NATS_URL,
            &stream.subject_template(),
            Some(&stream.name),
        ),
    )
    .await;
    let events = app.ingest_stripes("evt_nats", 12).await;
    deliver_all(&app, events.len(), 10).await;

    let messages = stream.messages().await;
    assert_eq!(messages.len(), events.len(), "one message per event");
    assert_eq!(event_ids(&messages, "nats-msg-id"), ids(&events));
    // Deliveries run concurrently: messages arrive in any order.
    for m in &messages {
        let event = EventId::parse(m.header("hookgate-event-id")).unwrap();
        let job = app.job(event, "bus").await;
        assert_eq!(m.header("nats-msg-id"), job.id.to_string());
        assert_eq!(m.header("hookgate-delivery-id"), job.id.to_string());
        assert_eq!(m.header("hookgate-source"), "stripe");
        assert_eq!(m.header("hookgate-event-type"), "invoice.paid");
        assert_eq!(m.header("hookgate-attempt"), "1");
        // The type's `.` is escaped: the value stays one subject token.
        assert_eq!(stream.subject_tail(&m.subject), "stripe.invoice%2Epaid");
        let stored = app.store.get_event(event).await.unwrap().unwrap();
        assert_eq!(m.body, stored.body);
    }
    assert_eq!(
        readyz(&app).await["destinations"][0]["ready"],
        true,
        "the stream exists and the server answers"
    );
}

async fn a_republish_after_a_crash_is_absorbed_by_the_duplicate_window(backend: Backend) {
    let stream = TestStream::create(NATS_URL).await;
    let app = app_with(
        backend,
        nats_destination("bus", NATS_URL, &stream.subject_template(), None),
    )
    .await;
    let event = app.ingest_stripe("evt_nats_crash").await;
    // Published and acknowledged, then the process "dies" before recording the outcome.
    let doomed = app.worker();
    doomed.crash_points().arm(CrashPoint::AfterSend, 1);
    doomed.run_once().await.unwrap();
    assert_eq!(stream.messages().await.len(), 1);
    assert_eq!(app.job(event, "bus").await.status, JobStatus::InProgress);

    app.reconciler().sweep_at(after_lease(&app)).await.unwrap();
    app.worker().run_once_at(after_lease(&app)).await.unwrap();
    let job = app.job(event, "bus").await;
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(job.attempts, 2, "published twice");
    let messages = stream.messages().await;
    assert_eq!(messages.len(), 1, "the stream kept one: {messages:?}");
    assert_eq!(messages[0].header("nats-msg-id"), job.id.to_string());
}

async fn a_replay_publishes_again_under_a_new_delivery_id(backend: Backend) {
    let stream = TestStream::create(NATS_URL).await;
    let app = app_with(
        backend,
        nats_destination("bus", NATS_URL, &stream.subject_template(), None),
    )
    .await;
    let event = app.ingest_stripe("evt_nats_replay").await;
    deliver_all(&app, 1, 10).await;
    replay(&app, event).await;
    deliver_all(&app, 2, 10).await;
    let messages = stream.messages().await;
    assert_eq!(messages.len(), 2, "the replay is a second message");
    assert_eq!(messages[0].header("hookgate-event-id"), event.to_string());
    assert_eq!(messages[1].header("hookgate-event-id"), event.to_string());
    assert_ne!(
        messages[0].header("nats-msg-id"),
        messages[1].header("nats-msg-id"),
        "a replay is a new delivery"
    );
}

async fn a_subject_the_stream_does_not_take_is_a_retryable_failure(backend: Backend) {
    let stream = TestStream::create(NATS_URL).await;
    // No stream takes `hgtest-nowhere.…`: the server answers "no responders" at once.
    let app = app_with(
        backend,
        nats_destination(
            "bus",
            NATS_URL,
            "hgtest-nowhere.{source}",
            Some(&stream.name),
        ),
    )
    .await;
    let event = app.ingest_stripe("evt_nats_nowhere").await;
    app.worker().run_once().await.unwrap();
    let job = app.job(event, "bus").await;
    assert_eq!(job.status, JobStatus::Pending, "to be retried");
    assert_eq!(job.attempts, 1);
    let error = job.last_error.unwrap();
    assert!(
        error.contains("publish") || error.contains("acknowledgement"),
        "{error}"
    );
    assert!(stream.messages().await.is_empty());
}

async fn a_server_killed_mid_stream_loses_nothing_and_duplicates_nothing(backend: Backend) {
    let mut server = NatsServer::start().await;
    let stream = TestStream::create(&server.url()).await;
    let app = app_with(
        backend,
        nats_destination(
            "bus",
            &server.url(),
            &stream.subject_template(),
            Some(&stream.name),
        ),
    )
    .await;
    let worker = app.start_worker();
    let total = 150;
    let ingest = ingest_in_background(&app, "evt_nats_restart", total);
    // Kill the server once a fifth has been handed over; JetStream's store is on disk.
    succeeded(&app, total / 5, Duration::from_secs(60)).await;
    server.kill();
    let r = app.client.get(app.url("/readyz")).send().await.unwrap();
    let ready: serde_json::Value = r.json().await.unwrap();
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert_eq!(ready["destinations"][0]["destination"], "bus");
    assert_eq!(ready["destinations"][0]["ready"], false);
    // Attempts fail while it is down (each one retried), then it comes back.
    wait_for_failed_attempts(&app).await;
    server.restart().await;
    let events = ingest.await.unwrap();
    succeeded(&app, total, Duration::from_secs(120)).await;
    worker.stop().await;

    let messages = stream.messages().await;
    assert_eq!(
        event_ids(&messages, "nats-msg-id"),
        ids(&events),
        "nothing lost"
    );
    assert_eq!(messages.len(), total, "nothing duplicated");
}

/// Waits until some attempt has failed (the worker has met the dead server).
pub(super) async fn wait_for_failed_attempts(app: &crate::support::TestApp) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let retries = app
        .metrics
        .delivery_attempts
        .with_label_values(&["bus", "retry"]);
    while retries.get() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no attempt failed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Pause, circuit breaker and dead letters are the queue's, whatever the kind: a paused
/// broker destination publishes nothing, and a failing one trips its breaker and ends its
/// jobs as dead letters when the schedule runs out.
async fn a_broker_destination_pauses_trips_and_dead_letters_like_any_other(backend: Backend) {
    let stream = TestStream::create(NATS_URL).await;
    let mut bus = nats_destination("bus", NATS_URL, "hgtest-nowhere.{source}", None);
    bus.retry_schedule = vec!["1ms".into()];
    bus.max_in_flight = 1;
    bus.circuit = Some(hookgate::config::CircuitSettings {
        failures: 2,
        cool_down: "1h".into(),
    });
    let app = app_with_adjusted(backend, bus, |_| {}).await;
    let post = |path: &'static str| {
        let app = &app;
        async move { app.admin(Method::POST, ACME_TOKEN, path, None, None).await }
    };

    assert_eq!(post("/destinations/bus/pause").await.status(), 200);
    let event = app.ingest_stripe("evt_nats_held").await;
    app.worker().run_once().await.unwrap();
    let job = app.job(event, "bus").await;
    assert_eq!((job.status, job.attempts), (JobStatus::Pending, 0), "held");
    assert_eq!(post("/destinations/bus/resume").await.status(), 200);

    // Two failed attempts (no stream takes the subject): a dead letter, and the breaker trips.
    app.worker().run_once().await.unwrap();
    app.worker()
        .run_once_at(chrono::Utc::now() + chrono::Duration::seconds(1))
        .await
        .unwrap();
    let job = app.job(event, "bus").await;
    assert_eq!((job.status, job.attempts), (JobStatus::Failed, 2));
    let state = app.admin_json(ACME_TOKEN, "/destinations/bus").await;
    assert_eq!(state["state"], "tripped", "{state}");
    assert!(stream.messages().await.is_empty());
}

/// With a `signing_secret`, a message carries the Standard Webhooks headers an HTTP delivery
/// carries, over the same id, timestamp and body; without one, none.
async fn a_signing_secret_signs_each_message_as_http_deliveries_are_signed(backend: Backend) {
    use base64::Engine as _;
    const SECRET: &str = "whsec_dGVzdC1idXMtc2lnbmluZy1rZXk=";
    let stream = TestStream::create(NATS_URL).await;
    let mut bus = nats_destination("bus", NATS_URL, &stream.subject_template(), None);
    bus.signing_secret = Some(SECRET.to_owned().into());
    let app = app_with(backend, bus).await;
    let event = app.ingest_stripe("evt_nats_signed").await;
    deliver_all(&app, 1, 10).await;
    let messages = stream.messages().await;
    let m = &messages[0];
    assert_eq!(m.header("webhook-id"), event.to_string());
    let timestamp: i64 = m.header("webhook-timestamp").parse().unwrap();
    let key = base64::engine::general_purpose::STANDARD
        .decode(SECRET.trim_start_matches("whsec_"))
        .unwrap();
    let expected =
        hookgate::delivery::sign_standard_webhook(&key, &event.to_string(), timestamp, &m.body);
    assert_eq!(m.header("webhook-signature"), expected.webhook_signature);

    let unsigned_stream = TestStream::create(NATS_URL).await;
    let unsigned = app_with(
        backend,
        nats_destination("bus", NATS_URL, &unsigned_stream.subject_template(), None),
    )
    .await;
    unsigned.ingest_stripe("evt_nats_unsigned").await;
    deliver_all(&unsigned, 1, 10).await;
    let messages = unsigned_stream.messages().await;
    assert!(!messages[0].headers.contains_key("webhook-signature"));
}
