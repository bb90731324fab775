//! The quarantine: requests to a known source that failed verification, kept (bounded) so
//! that an operator can re-verify them once the source's secrets are right, or see what was
//! refused. Kept off the ingest path: the handler hands a rejected request to a bounded queue
//! and answers at once; one writer per process stores what the queue holds, and what does
//! not fit is dropped and counted, so a flood of bad requests costs ingest neither waits nor
//! writes it did not already have.

mod pace;
mod reverify;
mod writer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};

use crate::config::{QuarantineConfig, Source};
use crate::store::{NewQuarantined, Store};
use crate::telemetry::Metrics;
use crate::verify::{Rejected, VerifyError};

pub use reverify::{reverify, Reverified};

/// Requests waiting for the writer, at most.
const QUEUE_REQUESTS: usize = 1_024;
/// Body bytes waiting for the writer, at most.
const QUEUE_BYTES: usize = 16 * 1024 * 1024;
/// Refused requests one source may hand over per second, and at once: a source whose secret
/// went out of date is kept whole at a few requests a second, and one flooded source
/// takes no more than its share of the queue and the writer.
const SOURCE_RATE: f64 = 64.0;
const SOURCE_BURST: f64 = 512.0;

enum Item {
    Keep(Box<NewQuarantined>),
    /// Answered once everything queued before it is written (tests, shutdown).
    Flush(oneshot::Sender<()>),
}

/// The ingest side of the quarantine: cheap to clone, never waits.
#[derive(Clone)]
pub struct Quarantine {
    queue: Option<mpsc::Sender<Item>>,
    queued_bytes: Arc<AtomicUsize>,
    max_bytes_per_source: usize,
    /// Each source's admission bucket, made at its first refused request.
    admission: Arc<Mutex<HashMap<String, pace::Bucket>>>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Quarantine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quarantine")
            .field("enabled", &self.queue.is_some())
            .finish()
    }
}

impl Quarantine {
    /// Starts this process's writer on the current runtime, unless the quarantine is off.
    pub fn start(store: Store, config: &QuarantineConfig, metrics: Arc<Metrics>) -> Self {
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let queue = config.enabled.then(|| {
            let (tx, rx) = mpsc::channel(QUEUE_REQUESTS);
            tokio::spawn(writer::run(
                store,
                config.clone(),
                rx,
                queued_bytes.clone(),
                metrics.clone(),
            ));
            tx
        });
        Self {
            queue,
            queued_bytes,
            max_bytes_per_source: usize::try_from(config.max_bytes_per_source)
                .unwrap_or(usize::MAX),
            admission: Arc::default(),
            metrics,
        }
    }

    /// Hands a rejected request to the writer if it is one worth keeping and there is room.
    /// Returns at once whatever happens.
    pub fn keep(&self, source: &Source, rejected: &Rejected, received_at: DateTime<Utc>) {
        let Some(queue) = &self.queue else { return };
        if !worth_keeping(&rejected.error) {
            return;
        }
        let count = |outcome: &str| {
            self.metrics
                .quarantine
                .with_label_values(&[source.name.as_str(), outcome])
                .inc();
        };
        let request = &rejected.request;
        let len = request.body().len();
        if len > self.max_bytes_per_source {
            count("dropped_too_large");
            return;
        }
        if !self.admit(source.name.as_str()) {
            count("dropped_rate");
            return;
        }
        // Reserve the bytes first: concurrent requests cannot together pass the bound.
        if self.queued_bytes.fetch_add(len, Ordering::AcqRel) + len > QUEUE_BYTES {
            self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
            count("dropped_full");
            return;
        }
        let permit = match queue.try_reserve() {
            Ok(permit) => permit,
            Err(_) => {
                self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
                count("dropped_full");
                return;
            }
        };
        let headers = crate::ingest::redacted_headers(request.headers());
        permit.send(Item::Keep(Box::new(NewQuarantined {
            id: uuid::Uuid::now_v7(),
            tenant: source.tenant.to_string(),
            source: source.name.to_string(),
            received_at,
            reason: rejected.error.code().to_owned(),
            message: storable(&rejected.error.to_string()),
            method: request.method().to_owned(),
            query: storable(request.query()),
            headers_json: serde_json::to_string(&headers)
                .expect("a list of string pairs always serialises"),
            body: request.body().clone(),
        })));
    }

    /// Whether `source` may hand over one more request now.
    fn admit(&self, source: &str) -> bool {
        let now = Instant::now();
        let mut buckets = self
            .admission
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(bucket) = buckets.get_mut(source) {
            return bucket.try_take(now);
        }
        buckets
            .entry(source.to_owned())
            .or_insert_with(|| pace::Bucket::full(SOURCE_RATE, SOURCE_BURST, now))
            .try_take(now)
    }

    /// Waits until every request handed over before this call is written (or dropped).
    pub async fn flush(&self) {
        let Some(queue) = &self.queue else { return };
        let (tx, rx) = oneshot::channel();
        if queue.send(Item::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

/// Refusals of a request that may be genuine: a signature, timestamp or id problem.
/// Handshake refusals (a GET nobody sends, a wrong verify token) are not webhooks.
fn worth_keeping(error: &VerifyError) -> bool {
    !matches!(
        error,
        VerifyError::UnknownHandshake
            | VerifyError::InvalidVerifyToken
            | VerifyError::InvalidHandshake(_)
    )
}

/// Text both stores can hold: PostgreSQL refuses a NUL in TEXT.
fn storable(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}
