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
    /// Events with at least one job in a status, or with no job at all.
    pub status: Option<EventStatus>,
    pub received_from: Option<DateTime<Utc>>,
    pub received_to: Option<DateTime<Utc>>,
}

/// An event's state as a filter names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventStatus {
    /// The event has at least one job in this status.
    Job(JobStatus),
    /// The event has no job: no route matched it (and it was not replayed since).
    NoRoute,
}

impl EventStatus {
    /// The job statuses' names, or `no_route`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "no_route" => Some(Self::NoRoute),
            s => JobStatus::parse(s).map(Self::Job),
        }
    }
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
pub(super) fn check_filter_text(fields: &[(&str, &Option<String>)]) -> Result<(), StoreError> {
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
    /// Its key's line, which it joins at the end.
    pub ordering: Option<crate::routing::JobOrdering>,
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
    /// The first request with this key is still running; a bulk one has done this many so
    /// far (its last committed progress).
    InProgress { done: Option<i64> },
}

/// What a bulk batch writes next to its state change.
#[derive(Debug, Clone, Copy)]
pub struct ProgressKey<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
}

/// How a bulk replay routes each event it replays.
pub trait ReplayRouting: Sync {
    /// The destinations of every event of `source`, when they do not depend on the event;
    /// otherwise `None`, and each event is read whole for [`ReplayRouting::route`].
    fn fixed(&self, source: &str) -> Option<Vec<String>>;
    /// The destinations of `event`.
    fn route(&self, event: &super::StoredEvent) -> Vec<String>;
    /// The destinations of `event`, each with the ordering key its job takes.
    fn route_ordered(
        &self,
        event: &super::StoredEvent,
    ) -> Vec<(String, Option<crate::routing::JobOrdering>)> {
        self.route(event).into_iter().map(|d| (d, None)).collect()
    }
}

/// A fixed list of destinations per source name.
impl ReplayRouting for std::collections::BTreeMap<String, Vec<String>> {
    fn fixed(&self, source: &str) -> Option<Vec<String>> {
        Some(self.get(source).cloned().unwrap_or_default())
    }

    fn route(&self, event: &super::StoredEvent) -> Vec<String> {
        self.get(&event.source).cloned().unwrap_or_default()
    }
}
