//! Ingest's group commit: concurrent requests share transactions, and each is answered only
//! after the commit that holds its event.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::config::Source;
use crate::domain::{EventId, Name, ProviderEventId};
use crate::queue::{Handoff, Reservation};
use crate::routing::JobOrdering;
use crate::store::{
    ClaimedJob, GroupCommit, InsertOutcome, NewEvent, Pacing, PreClaim, Store, StoreError,
};

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
    /// The destinations routing chose, and each job's delay.
    pub destinations: Vec<Name>,
    pub delays: Vec<std::time::Duration>,
    /// Either empty, or each job's ordering key (`NewEvent::orderings`).
    pub orderings: Vec<Option<JobOrdering>>,
}

impl PendingEvent {
    fn as_new_event<'a>(&'a self, claims: &'a [Option<PreClaim>]) -> NewEvent<'a> {
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
            destinations: &self.destinations,
            delays: &self.delays,
            claims,
            orderings: &self.orderings,
            route_digest: Some(self.source.routes.digest()),
        }
    }

    /// The job for `destination`, committed under `claim`, as a worker's claim returns it.
    fn claimed_job(&self, destination: &Name, claim: PreClaim) -> ClaimedJob {
        ClaimedJob {
            job_id: claim.job_id,
            claim_token: claim.token,
            attempt: 1,
            destination: destination.as_str().to_owned(),
            event_id: self.id,
            source: self.source.name.as_str().to_owned(),
            event_type: self.event_type.clone(),
            provider_event_id: self.provider_event_id.as_str().to_owned(),
            content_type: self.content_type.clone(),
            body: self.body.to_vec(),
        }
    }
}

/// How long an ingest batch may be in flight before another writer starts one beside it. It
/// is longer than a batch takes on a disk with fast syncs. There one batch at a time, holding
/// all that arrived during the last, costs PostgreSQL a quarter less CPU per event. It is
/// short enough that a batch waiting on a lock holds the others up only briefly.
const RELIEVE_AFTER: Duration = Duration::from_millis(2);

/// One request's answer from its batch: a batch refused for one row's data fails only that
/// row's request (see `insert_isolating`).
type Answer = Result<InsertOutcome, Arc<StoreError>>;

/// Group commit for ingest: concurrent requests' events share transactions.
#[derive(Clone)]
pub struct IngestBatcher {
    events: GroupCommit<PendingEvent, Answer>,
    handoff: Arc<OnceLock<Handoff>>,
}

impl IngestBatcher {
    /// Starts `writers` tasks writing up to `max_batch` events per transaction. They take
    /// turns, and another starts beside a batch in flight only after `RELIEVE_AFTER`. Must be
    /// called inside a tokio runtime.
    pub fn start(store: Store, writers: usize, max_batch: usize) -> Self {
        let handoff: Arc<OnceLock<Handoff>> = Arc::default();
        let local = handoff.clone();
        let write = move |batch: Vec<PendingEvent>| {
            let (store, handoff) = (store.clone(), local.get().cloned());
            async move { write_batch(&store, handoff.as_ref(), batch).await }
        };
        let pacing = Pacing {
            relieve_after: Some(RELIEVE_AFTER),
            ..Pacing::default()
        };
        let events = GroupCommit::start_paced(writers, max_batch, pacing, write);
        Self { events, handoff }
    }

    /// From now on, new jobs go straight to this process's workers when they have room
    /// (see `queue::Handoff`). At most once; later calls are ignored.
    pub fn hand_off_to(&self, handoff: Handoff) {
        let _ = self.handoff.set(handoff);
    }

    /// Queues the event and waits until its batch has committed (or failed).
    pub async fn submit(&self, event: PendingEvent) -> Result<InsertOutcome, Arc<StoreError>> {
        self.events.submit(event).await.and_then(|answer| answer)
    }

    /// Requests submitted so far.
    pub fn submitted(&self) -> u64 {
        self.events.submitted()
    }

    /// Returns once `n` requests in all have been submitted.
    pub async fn submitted_at_least(&self, n: u64) {
        self.events.submitted_at_least(n).await
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

/// Writes one batch. With a hand-off, each new job the worker has room for is claimed in the
/// same transaction and passed over after the commit; the slots of events that turn out to
/// be copies, or of a batch that fails, are given back when their reservations drop.
async fn write_batch(
    store: &Store,
    handoff: Option<&Handoff>,
    batch: Vec<PendingEvent>,
) -> Result<Vec<Answer>, StoreError> {
    let now = Utc::now();
    let reserved: Vec<Vec<Option<Reservation>>> = batch
        .iter()
        .map(|e| match handoff {
            // A delayed job is not due: it waits in the queue, not for this process's workers.
            // A keyed job goes through the claim, which alone knows whether a job of its key
            // is still ahead of it.
            Some(h) => e
                .destinations
                .iter()
                .enumerate()
                .map(|(i, d)| match (e.delays.get(i), e.orderings.get(i)) {
                    (Some(delay), _) if !delay.is_zero() => None,
                    (_, Some(Some(_))) => None,
                    _ => h.reserve(d.as_str(), e.id, now),
                })
                .collect(),
            None => Vec::new(),
        })
        .collect();
    let claims: Vec<Vec<Option<PreClaim>>> = reserved
        .iter()
        .map(|r| {
            r.iter()
                .map(|r| r.as_ref().map(Reservation::claim))
                .collect()
        })
        .collect();
    let events: Vec<NewEvent<'_>> = batch
        .iter()
        .zip(&claims)
        .map(|(e, c)| e.as_new_event(c))
        .collect();
    let outcomes = insert_isolating(store, &events).await?;
    for ((event, reservations), outcome) in batch.iter().zip(reserved).zip(&outcomes) {
        // Only the copy whose row was written has jobs; a later copy in the batch is
        // answered with the same id, but as a duplicate.
        if !matches!(outcome, Ok(InsertOutcome::Created(id)) if *id == event.id) {
            continue;
        }
        for (destination, reservation) in event.destinations.iter().zip(reservations) {
            if let Some(r) = reservation {
                r.dispatch(|claim| event.claimed_job(destination, claim));
            }
        }
    }
    Ok(outcomes)
}

/// Inserts the batch in one transaction. When the database refuses it for its data (an
/// error that is not the store being unavailable, so one row may be the cause), the batch is
/// split in halves, each its own transaction, until the refused rows stand alone: only their
/// requests fail, and every other request in the batch is stored and answered. A batch the
/// store cannot take at all fails whole, as a retry of its parts would fail the same way.
async fn insert_isolating(
    store: &Store,
    events: &[NewEvent<'_>],
) -> Result<Vec<Answer>, StoreError> {
    let mut answers: Vec<Option<Answer>> = vec![None; events.len()];
    let mut parts = Vec::new();
    parts.push(0..events.len());
    while let Some(part) = parts.pop() {
        let whole = part.len() == events.len();
        match store.insert_events(&events[part.clone()]).await {
            Ok(outcomes) => {
                for (slot, outcome) in answers[part].iter_mut().zip(outcomes) {
                    *slot = Some(Ok(outcome));
                }
            }
            Err(e @ StoreError::Database(_)) if part.len() > 1 => {
                tracing::warn!(error = %e, rows = part.len(), "an ingest batch was refused; splitting it");
                let middle = part.start + part.len() / 2;
                parts.push(middle..part.end);
                parts.push(part.start..middle);
            }
            Err(e) if whole => return Err(e),
            Err(e) => {
                let e = Arc::new(e);
                for slot in &mut answers[part] {
                    *slot = Some(Err(e.clone()));
                }
            }
        }
    }
    Ok(answers
        .into_iter()
        .map(|a| a.expect("every row is answered"))
        .collect())
}
