//! Values of the admin queries: filters, keyset cursors, summaries and idempotency records.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{StoreError, StoredJob};
use crate::domain::{EventId, JobId};
use crate::queue::JobStatus;

/// Which events an admin query is about. `tenant` always applies.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub tenant: String,
    pub source: Option<String>,
    pub event_type: Option<String>,
    pub provider_event_id: Option<String>,
    /// Events with at least one job in this status.
    pub status: Option<JobStatus>,
    pub received_from: Option<DateTime<Utc>>,
    pub received_to: Option<DateTime<Utc>>,
}

impl EventFilter {
    /// Refuses text no store can compare (see `check_filter_text`).
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        check_filter_text(&[
            ("source", &self.source),
            ("event_type", &self.event_type),
            ("provider_event_id", &self.provider_event_id),
        ])
    }
}

impl DeadLetterFilter {
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        check_filter_text(&[("destination", &self.destination), ("source", &self.source)])
    }
}

/// PostgreSQL refuses a NUL in text, and SQLite would compare it: both stores answer a
/// filter holding one the same way, as bad input, before any statement runs.
fn check_filter_text(fields: &[(&str, &Option<String>)]) -> Result<(), StoreError> {
    match fields
        .iter()
        .find(|(_, v)| v.as_deref().is_some_and(|v| v.contains('\0')))
    {
        Some((name, _)) => Err(StoreError::Unstorable(format!(
            "filter `{name}` contains a NUL character"
        ))),
        None => Ok(()),
    }
}

/// Dead letters: `failed` jobs not discarded, of sources in `tenant`.
#[derive(Debug, Clone, Default)]
pub struct DeadLetterFilter {
    pub tenant: String,
    pub destination: Option<String>,
    pub source: Option<String>,
    /// Only jobs that failed before this time (a bulk retry leaves alone what fails again
    /// while it runs).
    pub failed_before: Option<DateTime<Utc>>,
}

/// A keyset position: the last row of a page, by (time, id), newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageCursor {
    pub at: DateTime<Utc>,
    pub id: Uuid,
}

#[derive(Debug, Clone)]
pub struct EventSummary {
    pub id: EventId,
    pub tenant: String,
    pub source: String,
    pub provider_event_id: String,
    pub event_type: Option<String>,
    pub received_at: DateTime<Utc>,
    pub verified_secret_index: i32,
}

/// A job with a summary of its event (the dead-letter list, and tenant checks).
#[derive(Debug, Clone)]
pub struct JobWithEvent {
    pub job: StoredJob,
    pub event: EventSummary,
}

/// A job to create, with its id chosen up front so the response can be saved atomically.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub id: JobId,
    pub event_id: EventId,
    pub destination: String,
}

/// A response to save with Idempotency-Key, in the same transaction as the state change.
#[derive(Debug, Clone)]
pub struct SavedResponse<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
    pub status: u16,
    pub body: &'a [u8],
}

/// How far a bulk action has got, saved with each batch so a retry resumes there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkProgress {
    pub after: Option<PageCursor>,
    pub done: i64,
}

/// Where a key's record stands when a request with that key arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdempotencyBegin {
    /// Run the request (first time, or reclaiming an abandoned one from `progress`).
    Proceed { progress: Option<BulkProgress> },
    /// Answered before: send this again.
    Completed { status: u16, body: Vec<u8> },
    /// The key was used for a different request.
    Mismatch,
    /// The first request with this key is still running.
    InProgress,
}

/// What a bulk batch writes next to its state change.
#[derive(Debug, Clone, Copy)]
pub struct ProgressKey<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
}
