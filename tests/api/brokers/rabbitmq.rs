//! `kind = "rabbitmq"`: persistent, mandatory publishes on a confirm channel, done on the
//! broker's confirm.

use std::time::Duration;

use hookgate::domain::EventId;
use hookgate::queue::JobStatus;
use hookgate::worker::CrashPoint;
use lapin::types::{AMQPValue, FieldTable, LongString};

use super::nats::wait_for_failed_attempts;
use super::{
    after_lease, app_with, deliver_all, event_ids, ids, ingest_in_background, readyz, replay,
    succeeded,
};
use crate::both_backends;
use crate::support::broker_servers::RabbitServer;
use crate::support::brokers::{rabbit_destination, TestExchange, AMQP_URL};
use crate::support::Backend;

both_backends!(
    each_event_lands_on_the_queue_once_with_its_properties,
    a_republish_after_a_crash_carries_the_same_message_id,
    a_replay_publishes_again_under_a_new_message_id,
    an_unroutable_message_is_a_retryable_failure,
    a_nack_is_a_retryable_failure,
    readiness_names_a_missing_exchange,
    a_broker_killed_mid_stream_loses_nothing,
);

const ROUTING_KEY: &str = "{source}.{event_type}";

async fn each_event_lands_on_the_queue_once_with_its_properties(backend: Backend) {
    let mut exchange = TestExchange::create(AMQP_URL).await;
    let app = app_with(
        backend,
        rabbit_destination("bus", AMQP_URL, &exchange.exchange, ROUTING_KEY),
    )
    .await;
    let events = app.ingest_stripes("evt_amqp", 12).await;
    deliver_all(&app, events.len(), 10).await;

    let messages = exchange.messages().await;
    assert_eq!(messages.len(), events.len(), "one message per event");
    assert_eq!(event_ids(&messages, "message_id"), ids(&events));
    // Deliveries run concurrently: messages arrive in any order.
    for m in &messages {
        let event = EventId::parse(m.header("hookgate-event-id")).unwrap();
        let job = app.job(event, "bus").await;
        assert_eq!(m.header("message_id"), job.id.to_string());
        assert_eq!(m.header("delivery_mode"), "2", "persistent");
        assert_eq!(m.header("hookgate-source"), "stripe");
        assert_eq!(m.header("hookgate-attempt"), "1");
        assert_eq!(m.subject, "stripe.invoice%2Epaid");
        let stored = app.store.get_event(event).await.unwrap().unwrap();
        assert_eq!(m.body, stored.body);
    }
    let ready = readyz(&app).await;
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(ready["destinations"][0]["ready"], true);
    assert!(
        !ready.to_string().contains("guest:guest"),
        "no credentials in {ready}"
    );
}

async fn a_republish_after_a_crash_carries_the_same_message_id(backend: Backend) {
    let mut exchange = TestExchange::create(AMQP_URL).await;
    let app = app_with(
        backend,
        rabbit_destination("bus", AMQP_URL, &exchange.exchange, ROUTING_KEY),
    )
    .await;
    let event = app.ingest_stripe("evt_amqp_crash").await;
    let doomed = app.worker();
    doomed.crash_points().arm(CrashPoint::AfterSend, 1);
    doomed.run_once().await.unwrap();
    app.reconciler().sweep_at(after_lease(&app)).await.unwrap();
    app.worker().run_once_at(after_lease(&app)).await.unwrap();
    let job = app.job(event, "bus").await;
    assert_eq!(job.status, JobStatus::Succeeded);

    // RabbitMQ keeps both; the consumer drops the second by its message_id.
    let messages = exchange.wait_for(2, Duration::from_secs(10)).await;
    assert_eq!(messages.len(), 2);
    assert!(messages
        .iter()
        .all(|m| m.header("message_id") == job.id.to_string()));
    assert_eq!(event_ids(&messages, "message_id").len(), 1);
}

async fn a_replay_publishes_again_under_a_new_message_id(backend: Backend) {
    let mut exchange = TestExchange::create(AMQP_URL).await;
    let app = app_with(
        backend,
        rabbit_destination("bus", AMQP_URL, &exchange.exchange, ROUTING_KEY),
    )
    .await;
    let event = app.ingest_stripe("evt_amqp_replay").await;
    deliver_all(&app, 1, 10).await;
    replay(&app, event).await;
    deliver_all(&app, 2, 10).await;
    let messages = exchange.wait_for(2, Duration::from_secs(10)).await;
    assert_eq!(messages.len(), 2);
    assert_ne!(
        messages[0].header("message_id"),
        messages[1].header("message_id")
    );
    assert!(messages
        .iter()
        .all(|m| m.header("hookgate-event-id") == event.to_string()));
}

async fn an_unroutable_message_is_a_retryable_failure(backend: Backend) {
    // The default exchange routes by queue name, and no queue has this one.
    let app = app_with(
        backend,
        rabbit_destination("bus", AMQP_URL, "", "hgtest-no-such-queue.{source}"),
    )
    .await;
    let event = app.ingest_stripe("evt_amqp_unroutable").await;
    app.worker().run_once().await.unwrap();
    let job = app.job(event, "bus").await;
    assert_eq!(job.status, JobStatus::Pending, "to be retried");
    let error = job.last_error.unwrap();
    assert!(error.contains("unroutable"), "{error}");
}

async fn a_nack_is_a_retryable_failure(backend: Backend) {
    // A queue with no room that refuses publishes: the broker nacks.
    let mut arguments = FieldTable::default();
    arguments.insert("x-max-length".into(), AMQPValue::LongLongInt(0));
    arguments.insert(
        "x-overflow".into(),
        AMQPValue::LongString(LongString::from("reject-publish")),
    );
    let mut exchange = TestExchange::create_with_queue_arguments(AMQP_URL, arguments).await;
    let app = app_with(
        backend,
        rabbit_destination("bus", AMQP_URL, &exchange.exchange, ROUTING_KEY),
    )
    .await;
    let event = app.ingest_stripe("evt_amqp_nack").await;
    app.worker().run_once().await.unwrap();
    let job = app.job(event, "bus").await;
    assert_eq!(job.status, JobStatus::Pending, "to be retried");
    let error = job.last_error.unwrap();
    assert!(error.contains("nack"), "{error}");
    assert!(exchange.messages().await.is_empty());
}

async fn readiness_names_a_missing_exchange(backend: Backend) {
    let app = app_with(
        backend,
        rabbit_destination("bus", AMQP_URL, "hgtest.no-such-exchange", ROUTING_KEY),
    )
    .await;
    let ready = readyz(&app).await;
    assert_eq!(ready["status"], "degraded", "{ready}");
    let bus = &ready["destinations"][0];
    assert_eq!(bus["destination"], "bus");
    assert_eq!(bus["kind"], "rabbitmq");
    assert_eq!(bus["location"], "amqp://127.0.0.1:5672");
    assert!(
        bus["error"].as_str().unwrap().contains("no-such-exchange"),
        "{bus}"
    );
}

async fn a_broker_killed_mid_stream_loses_nothing(backend: Backend) {
    let mut server = RabbitServer::start().await;
    let mut exchange = TestExchange::create(&server.url()).await;
    let app = app_with(
        backend,
        rabbit_destination("bus", &server.url(), &exchange.exchange, ROUTING_KEY),
    )
    .await;
    let worker = app.start_worker();
    let total = 150;
    let ingest = ingest_in_background(&app, "evt_amqp_restart", total);
    succeeded(&app, total / 5, Duration::from_secs(60)).await;
    server.kill();
    wait_for_failed_attempts(&app).await;
    server.restart().await;
    let events = ingest.await.unwrap();
    succeeded(&app, total, Duration::from_secs(120)).await;
    worker.stop().await;

    // Confirmed messages are on disk in the durable queue; a publish whose confirm was lost
    // in the kill may be there twice, under one message_id.
    let messages = exchange.wait_for(total, Duration::from_secs(10)).await;
    assert_eq!(
        event_ids(&messages, "message_id"),
        ids(&events),
        "nothing lost"
    );
    assert!(messages.len() >= total);
}
