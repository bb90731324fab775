//! The ingest use-case: a verified event becomes one stored event and its delivery jobs.

use chrono::{DateTime, Utc};

use crate::config::Source;
use crate::domain::EventId;
use crate::store::{InsertOutcome, NewEvent, Store, StoreError};
use crate::verify::VerifiedEvent;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngestOutcome {
    Accepted(EventId),
    Duplicate(EventId),
}

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("could not store the event: {0}")]
    Store(#[from] StoreError),
}

/// Headers whose values are credentials for hookgate itself, not part of the webhook: kept
/// by name (so a replay shows they were sent) but never stored in clear.
const REDACTED_HEADERS: &[&str] = &["authorization", "proxy-authorization", "cookie"];

/// Stores the event and queues one job per destination of its source, atomically.
/// Returns only after the commit, so the caller may answer 2xx.
#[tracing::instrument(
    name = "ingest",
    skip_all,
    fields(source = %source.name, provider_event_id = %event.provider_event_id())
)]
pub async fn ingest(
    store: &Store,
    source: &Source,
    event: &VerifiedEvent,
    received_at: DateTime<Utc>,
) -> Result<IngestOutcome, IngestError> {
    let headers: Vec<(&str, &str)> = event
        .headers()
        .iter()
        .map(|(n, v)| {
            if REDACTED_HEADERS.contains(&n) {
                (n, "[redacted]")
            } else {
                (n, v)
            }
        })
        .collect();
    let headers_json =
        serde_json::to_string(&headers).expect("a list of string pairs always serialises");
    let new = NewEvent {
        id: EventId::generate(),
        tenant: &source.tenant,
        source: &source.name,
        provider_event_id: event.provider_event_id(),
        event_type: event.event_type(),
        received_at,
        content_type: event.content_type(),
        headers_json,
        body: event.body(),
        verified_scheme: event.scheme(),
        verified_secret_index: i32::try_from(event.secret_index()).unwrap_or(i32::MAX),
        destinations: &source.destinations,
    };
    let outcome = match store.insert_event(&new).await? {
        InsertOutcome::Created(id) => IngestOutcome::Accepted(id),
        InsertOutcome::Duplicate(id) => IngestOutcome::Duplicate(id),
    };
    Ok(outcome)
}
