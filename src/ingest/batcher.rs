//! Ingest's group commit: concurrent requests share transactions, and each is answered only
//! after the commit that holds its event.

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::config::Source;
use crate::domain::{EventId, ProviderEventId};
use crate::store::{GroupCommit, InsertOutcome, NewEvent, Store, StoreError};

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

/// Group commit for ingest: concurrent requests' events share transactions.
#[derive(Clone)]
pub struct IngestBatcher {
    events: GroupCommit<PendingEvent, InsertOutcome>,
}

impl IngestBatcher {
    /// Starts `writers` tasks (transactions in flight at once) writing up to `max_batch`
    /// events per transaction. Must be called inside a tokio runtime.
    pub fn start(store: Store, writers: usize, max_batch: usize) -> Self {
        let events = GroupCommit::start(writers, max_batch, move |batch: Vec<PendingEvent>| {
            let store = store.clone();
            async move {
                let events: Vec<NewEvent<'_>> = batch.iter().map(|e| e.as_new_event()).collect();
                store.insert_events(&events).await
            }
        });
        Self { events }
    }

    /// Queues the event and waits until its batch has committed (or failed).
    pub async fn submit(&self, event: PendingEvent) -> Result<InsertOutcome, Arc<StoreError>> {
        self.events.submit(event).await
    }

    /// Requests submitted so far.
    pub fn submitted(&self) -> u64 {
        self.events.submitted()
    }

    /// Batches committed or failed so far.
    pub fn batches(&self) -> u64 {
        self.events.batches()
    }

    /// While the guard lives, no new batch starts: requests queue up (tests use this to put
    /// several requests in one batch).
    pub async fn hold(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.events.hold().await
    }
}
