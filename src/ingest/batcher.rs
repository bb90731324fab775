//! Group commit: concurrent ingest requests share transactions. A writer task takes every
//! request waiting (up to a batch size), writes them in one transaction, and answers each
//! only after that commit. With no other request waiting, a batch is just one request: no
//! request waits for a batch to fill.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot, Mutex, RwLock};

use crate::config::Source;
use crate::domain::{EventId, ProviderEventId};
use crate::store::{InsertOutcome, NewEvent, Store, StoreError};

/// An event to store, owning its data so it can wait in the queue.
#[derive(Debug)]
pub struct PendingEvent {
    pub id: EventId,
    pub source: Arc<Source>,
    pub provider_event_id: ProviderEventId,
    pub event_type: Option<String>,
    pub received_at: DateTime<Utc>,
    pub content_type: Option<String>,
    pub headers_json: String,
    pub body: Bytes,
    pub verified_scheme: String,
    pub verified_secret_index: i32,
}

impl PendingEvent {
    fn as_new_event(&self) -> NewEvent<'_> {
        NewEvent {
            id: self.id,
            tenant: &self.source.tenant,
            source: &self.source.name,
            provider_event_id: &self.provider_event_id,
            event_type: self.event_type.as_deref(),
            received_at: self.received_at,
            content_type: self.content_type.as_deref(),
            headers_json: self.headers_json.clone(),
            body: &self.body,
            verified_scheme: &self.verified_scheme,
            verified_secret_index: self.verified_secret_index,
            destinations: &self.source.destinations,
        }
    }
}

type Reply = oneshot::Sender<Result<InsertOutcome, Arc<StoreError>>>;

struct Shared {
    receiver: Mutex<mpsc::Receiver<(PendingEvent, Reply)>>,
    /// Tests hold this to let requests pile up into one batch.
    gate: RwLock<()>,
    submitted: AtomicU64,
    batches: AtomicU64,
}

/// Handle to the writer tasks; cheap to clone.
#[derive(Clone)]
pub struct IngestBatcher {
    sender: mpsc::Sender<(PendingEvent, Reply)>,
    shared: Arc<Shared>,
}

impl IngestBatcher {
    /// Starts `writers` tasks (transactions in flight at once) writing up to `max_batch`
    /// events per transaction. Must be called inside a tokio runtime.
    pub fn start(store: Store, writers: usize, max_batch: usize) -> Self {
        // Bounded so a stalled store pushes back on the HTTP layer instead of piling up memory.
        let (sender, receiver) = mpsc::channel(max_batch.saturating_mul(writers).max(64) * 4);
        let shared = Arc::new(Shared {
            receiver: Mutex::new(receiver),
            gate: RwLock::new(()),
            submitted: AtomicU64::new(0),
            batches: AtomicU64::new(0),
        });
        for _ in 0..writers.max(1) {
            tokio::spawn(write_batches(
                store.clone(),
                shared.clone(),
                max_batch.max(1),
            ));
        }
        Self { sender, shared }
    }

    /// Queues the event and waits until its batch has committed (or failed).
    pub async fn submit(&self, event: PendingEvent) -> Result<InsertOutcome, Arc<StoreError>> {
        let (reply, answer) = oneshot::channel();
        self.shared.submitted.fetch_add(1, Ordering::SeqCst);
        if self.sender.send((event, reply)).await.is_err() {
            return Err(Arc::new(StoreError::Corrupt(
                "ingest writers stopped".into(),
            )));
        }
        answer.await.unwrap_or_else(|_| {
            Err(Arc::new(StoreError::Corrupt(
                "ingest writer stopped".into(),
            )))
        })
    }

    /// Requests submitted so far.
    pub fn submitted(&self) -> u64 {
        self.shared.submitted.load(Ordering::SeqCst)
    }

    /// Batches committed or failed so far.
    pub fn batches(&self) -> u64 {
        self.shared.batches.load(Ordering::SeqCst)
    }

    /// While the guard lives, no new batch starts: requests queue up (tests use this to put
    /// several requests in one batch).
    pub async fn hold(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.shared.gate.write().await
    }
}

async fn write_batches(store: Store, shared: Arc<Shared>, max_batch: usize) {
    loop {
        let mut batch = Vec::with_capacity(max_batch);
        let guard = {
            let mut receiver = shared.receiver.lock().await;
            let Some(first) = receiver.recv().await else {
                return;
            };
            batch.push(first);
            // Waiting here (not before `recv`) keeps one gatherer holding the queue, so
            // everything sent while the gate is held lands in the same batch.
            let guard = shared.gate.read().await;
            while batch.len() < max_batch {
                match receiver.try_recv() {
                    Ok(item) => batch.push(item),
                    Err(_) => break,
                }
            }
            guard
        };
        let events: Vec<NewEvent<'_>> = batch.iter().map(|(e, _)| e.as_new_event()).collect();
        let result = store.insert_events(&events).await;
        drop(events);
        drop(guard);
        shared.batches.fetch_add(1, Ordering::SeqCst);
        match result {
            Ok(outcomes) => {
                for ((_, reply), outcome) in batch.into_iter().zip(outcomes) {
                    let _ = reply.send(Ok(outcome));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, size = batch.len(), "ingest batch failed; answering 503 to each request in it");
                let e = Arc::new(e);
                for (_, reply) in batch {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}
