//! The values that cross the store boundary.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{EventId, JobId, Name, ProviderEventId};
use crate::queue::JobStatus;
use crate::routing::JobOrdering;

/// A verified event ready to be written, with the jobs it fans out to.
#[derive(Debug)]
pub struct NewEvent<'a> {
    pub id: EventId,
    pub tenant: &'a Name,
    pub source: &'a Name,
    pub provider_event_id: &'a ProviderEventId,
    pub event_type: Option<&'a str>,
    pub received_at: DateTime<Utc>,
    pub content_type: Option<&'a str>,
    /// JSON array of `[name, value]` pairs, in arrival order.
    pub headers_json: String,
    pub body: &'a [u8],
    pub verified_scheme: &'a str,
    pub verified_secret_index: i32,
    /// The destinations routing chose: one job each.
    pub destinations: &'a [Name],
    /// Either empty (no job is delayed), or one entry per destination: how long after
    /// `received_at` its job is due.
    pub delays: &'a [std::time::Duration],
    /// Either empty, or one entry per destination: the jobs this process's own workers take
    /// as they are created (see `queue::Handoff`).
    pub claims: &'a [Option<PreClaim>],
    /// Either empty (every job is unordered), or one entry per destination: the job's
    /// ordering key, when its route names one and the event has it.
    pub orderings: &'a [Option<JobOrdering>],
    /// The digest of the source's routes that chose `destinations` (`RouteTable::digest`);
    /// none for an event stored without routing.
    pub route_digest: Option<i64>,
}

/// A job claimed in the transaction that creates it: stored `in_progress` under this token
/// and lease, its first attempt counted, as a claim would leave it. If the process dies
/// before the attempt ends, the lease expires and the reconciler returns the job to the
/// queue, as for any claimed job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreClaim {
    pub job_id: JobId,
    pub token: Uuid,
    pub locked_until: DateTime<Utc>,
}

impl NewEvent<'_> {
    /// Each job's id, destination, due time, pre-claim and ordering, one per destination.
    pub fn jobs(&self) -> impl Iterator<Item = NewEventJob<'_>> + '_ {
        self.destinations.iter().enumerate().map(|(i, d)| {
            let claim = self.claims.get(i).and_then(Option::as_ref);
            let ordering = self.orderings.get(i).and_then(Option::as_ref);
            let due = match self.delays.get(i) {
                Some(delay) if !delay.is_zero() => chrono::Duration::from_std(*delay)
                    .ok()
                    .and_then(|delay| self.received_at.checked_add_signed(delay))
                    .unwrap_or(self.received_at),
                _ => self.received_at,
            };
            let id = claim.map_or_else(|| JobId::for_event(self.id), |c| c.job_id);
            NewEventJob {
                id,
                destination: d,
                due,
                claim,
                ordering,
            }
        })
    }
}

/// One job of a [`NewEvent`].
#[derive(Debug, Clone, Copy)]
pub struct NewEventJob<'a> {
    pub id: JobId,
    pub destination: &'a Name,
    pub due: DateTime<Utc>,
    pub claim: Option<&'a PreClaim>,
    pub ordering: Option<&'a JobOrdering>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertOutcome {
    Created(EventId),
    /// The (source, provider event id) pair was already stored, under this id.
    Duplicate(EventId),
}

#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub id: EventId,
    pub tenant: String,
    pub source: String,
    pub provider_event_id: String,
    pub event_type: Option<String>,
    pub received_at: DateTime<Utc>,
    pub content_type: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub verified_scheme: String,
    pub verified_secret_index: i32,
}

#[derive(Debug, Clone)]
pub struct StoredJob {
    pub id: JobId,
    pub event_id: EventId,
    pub destination: String,
    pub status: JobStatus,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub locked_until: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Set when an operator discarded this dead letter: it stays `failed`, out of the list.
    pub discarded_at: Option<DateTime<Utc>>,
    /// The key whose line the job is in (as stored: long keys by digest); none: unordered.
    pub ordering_key: Option<String>,
}

/// A job a worker has claimed, with what it needs to deliver it. `claim_token` fences every
/// later write: it must still match for the worker's outcome to count.
#[derive(Debug, Clone)]
pub struct ClaimedJob {
    pub job_id: JobId,
    pub claim_token: Uuid,
    /// This attempt's number, starting at 1.
    pub attempt: i32,
    pub destination: String,
    pub event_id: EventId,
    pub source: String,
    pub event_type: Option<String>,
    pub provider_event_id: String,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// The job's next state after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobUpdate {
    Succeeded,
    Retry { next_attempt_at: DateTime<Utc> },
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Succeeded,
    Retry,
    Failed,
    /// The worker's lease ran out before it reported; the reconciler recorded this.
    LeaseExpired,
    /// The worker reported after losing its claim: recorded, but the job was not changed.
    LeaseLost,
    /// The worker shut down before the attempt finished and handed the job back.
    Released,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Retry => "retry",
            Self::Failed => "failed",
            Self::LeaseExpired => "lease_expired",
            Self::LeaseLost => "lease_lost",
            Self::Released => "released",
        }
    }
}

/// One attempt, for the `delivery_attempts` history (ordered by insertion: ids are UUIDv7).
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub attempt: i32,
    pub worker_id: String,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i64,
    pub status_code: Option<i32>,
    pub error: Option<String>,
    pub outcome: AttemptOutcome,
}

/// A delivery's result for one claimed job, as written by `Store::finish_jobs`.
#[derive(Debug, Clone)]
pub struct JobOutcome {
    pub job: JobId,
    pub claim_token: Uuid,
    pub update: JobUpdate,
    pub record: AttemptRecord,
    pub now: DateTime<Utc>,
}

impl JobOutcome {
    /// The job's new status and, for a retry, when it is due.
    pub(crate) fn status(&self) -> (&'static str, Option<DateTime<Utc>>) {
        match self.update {
            JobUpdate::Succeeded => ("succeeded", None),
            JobUpdate::Retry { next_attempt_at } => ("pending", Some(next_attempt_at)),
            JobUpdate::Failed => ("failed", None),
        }
    }
}

#[derive(Debug, Clone)]
pub struct StoredAttempt {
    pub job_id: JobId,
    pub attempt: i32,
    pub worker_id: String,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i64,
    pub status_code: Option<i32>,
    pub error: Option<String>,
    pub outcome: String,
}

/// An `in_progress` job whose lease ran out.
#[derive(Debug, Clone)]
pub struct ExpiredLease {
    pub job_id: JobId,
    pub claim_token: Uuid,
    pub attempts: i32,
    pub destination: String,
}

/// Where a scan of one source's events in arrival order stopped: the last event it read.
/// The next scan starts strictly after it, so events that share a timestamp are neither
/// skipped nor read twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrivalCursor {
    pub received_at: DateTime<Utc>,
    pub event: EventId,
}

impl ArrivalCursor {
    /// Before every event received at or after `at`.
    pub fn starting_at(at: DateTime<Utc>) -> Self {
        Self {
            received_at: at,
            event: EventId::from_uuid(Uuid::nil()),
        }
    }
}
