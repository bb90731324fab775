//! Row types, derived once for both databases: the columns that the schemas store
//! differently are read through `codec::{Id, At}`.

use super::codec::{At, Id};
use super::{
    headers_from_json, EventSummary, ExpiredLease, StoreError, StoredAttempt, StoredEvent,
    StoredJob,
};
use crate::queue::JobStatus;

/// `events` columns for `EventRow`; headers as text (JSONB on PostgreSQL).
pub(super) const EVENT_COLUMNS: &str = "id, tenant, source, provider_event_id, event_type, \
    received_at, content_type, CAST(headers AS TEXT) AS headers, body, verified_scheme, \
    verified_secret_index";

/// `jobs` columns for `JobRow`, from a table aliased `j`.
pub(super) const JOB_COLUMNS: &str = "j.id, j.event_id, j.destination, j.status, j.attempts, \
    j.next_attempt_at, j.locked_until, j.last_error, j.created_at, j.updated_at, j.discarded_at, j.ordering_key";

/// `events` columns for `SummaryRow`, from a table aliased `e`, prefixed so that they can be
/// read alongside a job's.
pub(super) const SUMMARY_COLUMNS: &str = "e.id AS e_id, e.tenant AS e_tenant, \
    e.source AS e_source, e.provider_event_id AS e_provider_event_id, \
    e.event_type AS e_event_type, e.received_at AS e_received_at, \
    e.verified_secret_index AS e_verified_secret_index";

#[derive(sqlx::FromRow)]
pub(super) struct EventRow {
    id: Id,
    tenant: String,
    source: String,
    provider_event_id: String,
    event_type: Option<String>,
    received_at: At,
    content_type: Option<String>,
    headers: String,
    body: Vec<u8>,
    verified_scheme: String,
    verified_secret_index: i32,
}

impl TryFrom<EventRow> for StoredEvent {
    type Error = StoreError;

    fn try_from(r: EventRow) -> Result<Self, StoreError> {
        Ok(Self {
            id: r.id.into(),
            tenant: r.tenant,
            source: r.source,
            provider_event_id: r.provider_event_id,
            event_type: r.event_type,
            received_at: r.received_at.0,
            content_type: r.content_type,
            headers: headers_from_json(&r.headers)?,
            body: r.body,
            verified_scheme: r.verified_scheme,
            verified_secret_index: r.verified_secret_index,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct JobRow {
    id: Id,
    event_id: Id,
    destination: String,
    status: String,
    attempts: i32,
    next_attempt_at: At,
    locked_until: Option<At>,
    last_error: Option<String>,
    created_at: At,
    updated_at: At,
    discarded_at: Option<At>,
    ordering_key: Option<String>,
}

impl TryFrom<JobRow> for StoredJob {
    type Error = StoreError;

    fn try_from(r: JobRow) -> Result<Self, StoreError> {
        Ok(Self {
            id: r.id.into(),
            event_id: r.event_id.into(),
            destination: r.destination,
            status: JobStatus::parse(&r.status)
                .ok_or_else(|| StoreError::Corrupt(format!("job status {:?}", r.status)))?,
            attempts: r.attempts,
            next_attempt_at: r.next_attempt_at.0,
            locked_until: r.locked_until.map(|t| t.0),
            last_error: r.last_error,
            created_at: r.created_at.0,
            updated_at: r.updated_at.0,
            discarded_at: r.discarded_at.map(|t| t.0),
            ordering_key: r.ordering_key,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct SummaryRow {
    e_id: Id,
    e_tenant: String,
    e_source: String,
    e_provider_event_id: String,
    e_event_type: Option<String>,
    e_received_at: At,
    e_verified_secret_index: i32,
}

impl From<SummaryRow> for EventSummary {
    fn from(r: SummaryRow) -> Self {
        Self {
            id: r.e_id.into(),
            tenant: r.e_tenant,
            source: r.e_source,
            provider_event_id: r.e_provider_event_id,
            event_type: r.e_event_type,
            received_at: r.e_received_at.0,
            verified_secret_index: r.e_verified_secret_index,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct AttemptRow {
    job_id: Id,
    attempt: i32,
    worker_id: String,
    started_at: At,
    duration_ms: i64,
    status_code: Option<i32>,
    error: Option<String>,
    outcome: String,
}

impl From<AttemptRow> for StoredAttempt {
    fn from(r: AttemptRow) -> Self {
        Self {
            job_id: r.job_id.into(),
            attempt: r.attempt,
            worker_id: r.worker_id,
            started_at: r.started_at.0,
            duration_ms: r.duration_ms,
            status_code: r.status_code,
            error: r.error,
            outcome: r.outcome,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct LeaseRow {
    id: Id,
    claim_token: Id,
    attempts: i32,
    destination: String,
}

impl From<LeaseRow> for ExpiredLease {
    fn from(r: LeaseRow) -> Self {
        Self {
            job_id: r.id.into(),
            claim_token: r.claim_token.0,
            attempts: r.attempts,
            destination: r.destination,
        }
    }
}
