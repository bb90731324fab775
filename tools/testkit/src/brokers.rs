//! The brokers' side of the broker-destination tests: a JetStream stream and a RabbitMQ
//! exchange with a queue, each made for one test under a unique name and removed when it is
//! dropped, and what they received, read back the way a consumer would.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Connection, ConnectionProperties, ExchangeKind};

/// The machine's NATS server (JetStream on) and RabbitMQ broker.
pub const NATS_URL: &str = "nats://127.0.0.1:4222";
pub const AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// One message as a consumer sees it.
#[derive(Debug, Clone)]
pub struct BrokerMessage {
    /// The NATS subject, or the AMQP routing key.
    pub subject: String,
    /// Header names in lower case. AMQP's `message_id` and `content_type` are here too.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl BrokerMessage {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers))
    }
}

fn unique() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

/// A stream of its own on a JetStream server, taking `hgtest.<id>.>`.
pub struct TestStream {
    pub url: String,
    pub name: String,
    prefix: String,
    context: jetstream::Context,
}

impl TestStream {
    pub async fn create(url: &str) -> Self {
        let id = unique();
        let client = async_nats::connect(url).await.expect("NATS answers");
        let context = jetstream::new(client);
        let name = format!("HGTEST_{id}");
        let prefix = format!("hgtest.{id}");
        context
            .create_stream(stream::Config {
                name: name.clone(),
                subjects: vec![format!("{prefix}.>")],
                storage: stream::StorageType::File,
                duplicate_window: Duration::from_secs(120),
                // Gone on its own should a test die before removing it.
                max_age: Duration::from_secs(3600),
                ..Default::default()
            })
            .await
            .expect("the test stream is created");
        Self {
            url: url.to_owned(),
            name,
            prefix,
            context,
        }
    }

    /// `hgtest.<id>.{source}.{event_type}`.
    pub fn subject_template(&self) -> String {
        format!("{}.{{source}}.{{event_type}}", self.prefix)
    }

    /// Whatever follows the stream's own prefix in a subject.
    pub fn subject_tail<'a>(&self, subject: &'a str) -> &'a str {
        subject
            .strip_prefix(&self.prefix)
            .and_then(|s| s.strip_prefix('.'))
            .unwrap_or(subject)
    }

    /// Every message the stream holds, in order.
    pub async fn messages(&self) -> Vec<BrokerMessage> {
        let mut stream = self
            .context
            .get_stream(&self.name)
            .await
            .expect("the test stream exists");
        let last = stream
            .info()
            .await
            .expect("stream info")
            .state
            .last_sequence;
        let mut out = Vec::new();
        for seq in 1..=last {
            let Ok(m) = stream.get_raw_message(seq).await else {
                continue;
            };
            let headers = m
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string().to_ascii_lowercase(),
                        v.first().map(|v| v.to_string()).unwrap_or_default(),
                    )
                })
                .collect();
            out.push(BrokerMessage {
                subject: m.subject.to_string(),
                headers,
                body: m.payload.to_vec(),
            });
        }
        out
    }

    /// The stream's messages once it holds at least `n`, polled until `within` has passed.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<BrokerMessage> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let messages = self.messages().await;
            if messages.len() >= n || tokio::time::Instant::now() >= deadline {
                return messages;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for TestStream {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        run_detached(async move {
            if let Ok(client) = async_nats::connect(url).await {
                let _ = jetstream::new(client).delete_stream(name).await;
            }
        });
    }
}

/// Runs cleanup to its end on a runtime of its own: `Drop` cannot await, and a task spawned
/// on the test's runtime may never run once the test returns.
fn run_detached(work: impl std::future::Future<Output = ()> + Send + 'static) {
    let _ = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(async {
                let _ = tokio::time::timeout(Duration::from_secs(10), work).await;
            });
        }
    })
    .join();
}

/// A durable topic exchange of its own with one durable queue bound to every key (`#`).
pub struct TestExchange {
    pub url: String,
    pub exchange: String,
    pub queue: String,
    received: Vec<BrokerMessage>,
}

impl TestExchange {
    pub async fn create(url: &str) -> Self {
        Self::create_with_queue_arguments(url, FieldTable::default()).await
    }

    /// With queue arguments, e.g. `x-max-length` and `x-overflow = reject-publish`, which
    /// make the broker nack what the queue has no room for.
    pub async fn create_with_queue_arguments(url: &str, arguments: FieldTable) -> Self {
        let id = unique();
        let exchange = format!("hgtest.{id}");
        let queue = format!("hgtest.{id}");
        let connection = Connection::connect(url, ConnectionProperties::default())
            .await
            .expect("RabbitMQ answers");
        let channel = connection.create_channel().await.expect("a channel");
        channel
            .exchange_declare(
                exchange.as_str().into(),
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("the test exchange is declared");
        channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                arguments,
            )
            .await
            .expect("the test queue is declared");
        channel
            .queue_bind(
                queue.as_str().into(),
                exchange.as_str().into(),
                "#".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("the test queue is bound");
        let _ = connection.close(200, "OK".into()).await;
        Self {
            url: url.to_owned(),
            exchange,
            queue,
            received: Vec::new(),
        }
    }

    /// Every message consumed so far, after taking (and acknowledging) what the queue holds
    /// now.
    pub async fn messages(&mut self) -> Vec<BrokerMessage> {
        let connection = Connection::connect(&self.url, ConnectionProperties::default())
            .await
            .expect("RabbitMQ answers");
        let channel = connection.create_channel().await.expect("a channel");
        while let Some(m) = channel
            .basic_get(self.queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get")
        {
            let p = &m.delivery.properties;
            let mut headers = BTreeMap::new();
            if let Some(table) = p.headers() {
                for (k, v) in table.inner() {
                    if let AMQPValue::LongString(s) = v {
                        headers.insert(
                            k.to_string().to_ascii_lowercase(),
                            String::from_utf8_lossy(s.as_bytes()).into_owned(),
                        );
                    }
                }
            }
            if let Some(id) = p.message_id() {
                headers.insert("message_id".into(), id.to_string());
            }
            if let Some(ct) = p.content_type() {
                headers.insert("content_type".into(), ct.to_string());
            }
            if let Some(mode) = p.delivery_mode() {
                headers.insert("delivery_mode".into(), mode.to_string());
            }
            self.received.push(BrokerMessage {
                subject: m.delivery.routing_key.to_string(),
                headers,
                body: m.delivery.data.clone(),
            });
        }
        let _ = connection.close(200, "OK".into()).await;
        self.received.clone()
    }

    /// The messages once at least `n` have been consumed, polled until `within` has passed.
    pub async fn wait_for(&mut self, n: usize, within: Duration) -> Vec<BrokerMessage> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let messages = self.messages().await;
            if messages.len() >= n || tokio::time::Instant::now() >= deadline {
                return messages;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for TestExchange {
    fn drop(&mut self) {
        let (url, exchange, queue) = (self.url.clone(), self.exchange.clone(), self.queue.clone());
        run_detached(async move {
            if let Ok(c) = Connection::connect(&url, ConnectionProperties::default()).await {
                if let Ok(ch) = c.create_channel().await {
                    let _ = ch
                        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                        .await;
                    let _ = ch
                        .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                        .await;
                }
                let _ = c.close(200, "OK".into()).await;
            }
        });
    }
}

/// A `kind = "nats"` destination named `name`, retrying after a tenth of a second (up to 50
/// times), so a test sees its retries without moving the clock.
pub fn nats_destination(
    name: &str,
    url: &str,
    subject: &str,
    stream: Option<&str>,
) -> hookgate::config::DestinationSettings {
    destination(serde_json::json!({
        "name": name, "kind": "nats", "url": url, "subject": subject, "stream": stream,
    }))
}

/// A `kind = "rabbitmq"` destination named `name`, retrying as `nats_destination` does.
pub fn rabbit_destination(
    name: &str,
    url: &str,
    exchange: &str,
    routing_key: &str,
) -> hookgate::config::DestinationSettings {
    destination(serde_json::json!({
        "name": name, "kind": "rabbitmq", "url": url, "exchange": exchange,
        "routing_key": routing_key,
    }))
}

fn destination(mut table: serde_json::Value) -> hookgate::config::DestinationSettings {
    // Quick retries first, then a retry a second for two minutes: the tests that kill a
    // broker wait for it to come back, and a RabbitMQ node on a loaded machine takes tens of
    // seconds to restart; a job that ran out of retries meanwhile would be a dead letter.
    let mut schedule = vec!["100ms"; 50];
    schedule.extend(["1s"; 120]);
    table["retry_schedule"] = serde_json::json!(schedule);
    table["timeout"] = serde_json::json!("2s");
    if table["stream"].is_null() {
        table.as_object_mut().unwrap().remove("stream");
    }
    serde_json::from_value(table).expect("a valid destination table")
}
