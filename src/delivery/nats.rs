//! Hand-off to NATS JetStream: a publish that counts only once the stream acknowledges it.
//!
//! Each message carries `Nats-Msg-Id` = the job's delivery id, the same on every attempt of
//! the job, so a republish after a crash or a lost acknowledgement falls inside the stream's
//! duplicate window and is stored once (JetStream then acknowledges it flagged `duplicate`,
//! which counts as delivered). The client reconnects by itself after a broker restart.

use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage};
use bytes::Bytes;
use secrecy::ExposeSecret;
use tokio::sync::OnceCell;

use super::message::MessageHeaders;
use crate::config::NatsTarget;
use crate::queue::Verdict;

pub struct NatsLink {
    context: OnceCell<jetstream::Context>,
}

/// The outcome of one publish, before it is timed and reported.
pub struct Published {
    pub verdict: Verdict,
    pub error: Option<String>,
}

impl NatsLink {
    pub fn new() -> Self {
        Self {
            context: OnceCell::new(),
        }
    }

    /// The JetStream context, connecting on first use. A failed connect leaves the cell
    /// empty, so the next attempt tries again; once connected, the client keeps itself
    /// connected.
    async fn context(
        &self,
        target: &NatsTarget,
        timeout: Duration,
    ) -> Result<&jetstream::Context, String> {
        self.context
            .get_or_try_init(|| async {
                let client = async_nats::ConnectOptions::new()
                    .name(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
                    .connection_timeout(timeout)
                    .connect(target.url.expose_secret())
                    .await
                    // The error's text names the server, never the credentials.
                    .map_err(|e| format!("cannot connect to NATS: {e}"))?;
                let mut context = jetstream::new(client);
                context.set_timeout(timeout);
                Ok(context)
            })
            .await
    }

    pub async fn publish(
        &self,
        target: &NatsTarget,
        timeout: Duration,
        subject: String,
        headers: &MessageHeaders,
        body: Bytes,
    ) -> Published {
        let attempt = async {
            let context = self.context(target, timeout).await?;
            let mut message = PublishMessage::build()
                .payload(body)
                .message_id(&headers.delivery_id);
            for (name, value) in headers.pairs() {
                message = message.header(name, value.as_str());
            }
            if let Some(stream) = &target.stream {
                message = message.expected_stream(stream);
            }
            let ack = context
                .send_publish(subject, message)
                .await
                .map_err(|e| format!("publish failed: {e}"))?;
            ack.await
                .map_err(|e| format!("no acknowledgement from JetStream: {e}"))
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(ack)) => {
                if ack.duplicate {
                    tracing::info!(
                        stream = %ack.stream,
                        "JetStream already held this delivery id: counted as delivered"
                    );
                }
                Published {
                    verdict: Verdict::Delivered,
                    error: None,
                }
            }
            Ok(Err(error)) => retry(error),
            Err(_) => retry(format!(
                "timeout: no acknowledgement from JetStream within {timeout:?}"
            )),
        }
    }

    /// Whether the server answers now and, when the destination names a stream, the stream
    /// exists.
    pub async fn check(&self, target: &NatsTarget, timeout: Duration) -> Result<(), String> {
        let context = self.context(target, timeout).await?;
        let state = context.client().connection_state();
        if state != async_nats::connection::State::Connected {
            return Err(format!("not connected to NATS ({state})"));
        }
        if let Some(stream) = &target.stream {
            context
                .get_stream(stream)
                .await
                .map_err(|e| format!("stream {stream:?}: {e}"))?;
        }
        Ok(())
    }
}

impl Default for NatsLink {
    fn default() -> Self {
        Self::new()
    }
}

fn retry(error: String) -> Published {
    Published {
        verdict: Verdict::Retry { retry_after: None },
        error: Some(error),
    }
}
