//! Hand-off to RabbitMQ: a persistent, `mandatory` publish on a channel in confirm mode,
//! done only when the broker confirms it. A nack, a return (no queue bound for the routing
//! key), a closed connection or no confirm within the timeout is a retryable failure.
//!
//! One connection and one channel per destination, shared by its deliveries (confirms are
//! matched per publish, so many are in flight at once). When either is found closed, the
//! next delivery connects afresh: a broker restart costs the attempts in flight, which are
//! retried, and nothing else.

use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use secrecy::ExposeSecret;
use tokio::sync::Mutex;

use super::message::MessageHeaders;
use super::nats::Published;
use crate::config::RabbitTarget;
use crate::queue::Verdict;

pub struct RabbitLink {
    open: Mutex<Option<(Connection, Channel)>>,
}

impl RabbitLink {
    pub fn new() -> Self {
        Self {
            open: Mutex::new(None),
        }
    }

    /// The destination's channel, connecting when there is none or it has closed.
    async fn channel(&self, target: &RabbitTarget, timeout: Duration) -> Result<Channel, String> {
        let mut open = self.open.lock().await;
        if let Some((connection, channel)) = open.as_ref() {
            if connection.status().connected() && channel.status().connected() {
                return Ok(channel.clone());
            }
        }
        *open = None;
        let connect = async {
            let connection =
                Connection::connect(target.url.expose_secret(), ConnectionProperties::default())
                    .await?;
            let channel = connection.create_channel().await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            Ok::<_, lapin::Error>((connection, channel))
        };
        let (connection, channel) = tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| format!("timeout: cannot connect to RabbitMQ within {timeout:?}"))?
            .map_err(|e| format!("cannot connect to RabbitMQ: {e}"))?;
        *open = Some((connection, channel.clone()));
        Ok(channel)
    }

    /// Forgets the channel after a failure, so the next delivery opens a fresh one.
    async fn reset(&self) {
        *self.open.lock().await = None;
    }

    pub async fn publish(
        &self,
        target: &RabbitTarget,
        timeout: Duration,
        exchange: String,
        routing_key: String,
        headers: &MessageHeaders,
        body: &[u8],
    ) -> Published {
        let attempt = async {
            let channel = self
                .channel(target, timeout)
                .await
                .map_err(Failure::Channel)?;
            let confirm = channel
                .basic_publish(
                    ShortString::from(exchange),
                    ShortString::from(routing_key),
                    BasicPublishOptions {
                        // An unroutable message comes back as a failure, not a silent drop.
                        mandatory: true,
                        immediate: false,
                    },
                    body,
                    properties(headers),
                )
                .await
                .map_err(|e| Failure::Channel(format!("publish failed: {e}")))?;
            match confirm.await {
                Ok(Confirmation::Ack(None)) => Ok(()),
                Ok(Confirmation::Ack(Some(returned))) => Err(Failure::Refused(format!(
                    "unroutable: returned by the broker ({} {})",
                    returned.reply_code, returned.reply_text
                ))),
                Ok(Confirmation::Nack(_)) => Err(Failure::Refused(
                    "nacked: the broker could not take the message".into(),
                )),
                Ok(Confirmation::NotRequested) => Err(Failure::Channel(
                    "the channel is not in confirm mode".into(),
                )),
                Err(e) => Err(Failure::Channel(format!("no confirm from RabbitMQ: {e}"))),
            }
        };
        let result = match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(())) => {
                return Published {
                    verdict: Verdict::Delivered,
                    error: None,
                }
            }
            Ok(Err(failure)) => failure,
            Err(_) => Failure::Channel(format!(
                "timeout: no confirm from RabbitMQ within {timeout:?}"
            )),
        };
        let error = match result {
            Failure::Refused(e) => e,
            Failure::Channel(e) => {
                self.reset().await;
                e
            }
        };
        Published {
            verdict: Verdict::Retry { retry_after: None },
            error: Some(error),
        }
    }

    /// Whether the broker takes a connection now and, for a fixed exchange name, the
    /// exchange exists (a passive declare, on a channel of its own: a failed one closes it).
    pub async fn check(&self, target: &RabbitTarget, timeout: Duration) -> Result<(), String> {
        self.channel(target, timeout).await?;
        if !target.exchange.is_fixed() {
            return Ok(());
        }
        let exchange = target.exchange.render(&super::template::Values {
            source: "",
            event_type: None,
            destination: "",
        });
        if exchange.is_empty() {
            return Ok(());
        }
        let open = self.open.lock().await;
        let Some((connection, _)) = open.as_ref() else {
            return Err("the connection closed".into());
        };
        let probe = async {
            let channel = connection.create_channel().await?;
            let declared = channel
                .exchange_declare(
                    ShortString::from(exchange.clone()),
                    lapin::ExchangeKind::Topic,
                    ExchangeDeclareOptions {
                        passive: true,
                        ..ExchangeDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await;
            if declared.is_ok() {
                let _ = channel.close(200, "OK".into()).await;
            }
            declared
        };
        tokio::time::timeout(timeout, probe)
            .await
            .map_err(|_| "timeout: no answer from RabbitMQ".to_owned())?
            .map_err(|e| format!("exchange {exchange:?}: {e}"))
    }
}

impl Default for RabbitLink {
    fn default() -> Self {
        Self::new()
    }
}

enum Failure {
    /// The broker answered, and not with an ack: the channel is fine.
    Refused(String),
    /// The channel or connection failed: open a fresh one next time.
    Channel(String),
}

fn properties(headers: &MessageHeaders) -> BasicProperties {
    let mut table = FieldTable::default();
    for (name, value) in headers.pairs() {
        if name != "content-type" {
            table.insert(
                ShortString::from(name),
                AMQPValue::LongString(LongString::from(value.as_bytes())),
            );
        }
    }
    let mut properties = BasicProperties::default()
        // Persistent: a durable queue keeps it across a broker restart.
        .with_delivery_mode(2)
        .with_message_id(ShortString::from(headers.delivery_id.clone()))
        .with_app_id(ShortString::from("hookgate"))
        .with_timestamp(u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(0))
        .with_headers(table);
    if let Some(ct) = headers.get("content-type") {
        properties = properties.with_content_type(ShortString::from(ct));
    }
    properties
}
