//! The ingest use-case: a verified event becomes one stored event and its delivery jobs.

mod batcher;

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::Source;
use crate::domain::EventId;
use crate::routing::EventFacts;
use crate::store::{InsertOutcome, StoreError};
use crate::verify::{RequestHeaders, VerifiedEvent};

pub use batcher::{IngestBatcher, PendingEvent};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngestOutcome {
    Accepted(EventId),
    Duplicate(EventId),
}

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("could not store the event: {0}")]
    Store(#[from] Arc<StoreError>),
}

/// Headers whose values are credentials for hookgate itself, not part of the webhook: kept
/// by name (so a replay shows they were sent) but never stored in clear.
const REDACTED_HEADERS: &[&str] = &["authorization", "proxy-authorization", "cookie"];

/// The headers as stored: credential headers keep their name, not their value.
pub(crate) fn redacted_headers(headers: &RequestHeaders) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|(n, v)| {
            if REDACTED_HEADERS.contains(&n) {
                (n, "[redacted]")
            } else {
                (n, v)
            }
        })
        .collect()
}

/// The event type as both stores can hold it. PostgreSQL's TEXT refuses a NUL, so each one
/// becomes U+FFFD: a validly signed event is stored, not refused for its metadata (a refusal
/// would have the provider retry it until it gives up), and the body keeps the exact bytes.
fn storable_type(event_type: &str) -> String {
    event_type.replace('\0', "\u{FFFD}")
}

/// Stores the event and queues one job per destination its source's routes choose (none
/// when no route matches: the event is stored all the same), atomically, sharing
/// the transaction with concurrent requests (group commit). Returns only after the commit,
/// so the caller may answer 2xx.
#[tracing::instrument(
    name = "ingest",
    skip_all,
    fields(source = %source.name, provider_event_id = %event.provider_event_id())
)]
pub async fn ingest(
    batcher: &IngestBatcher,
    source: &Arc<Source>,
    event: VerifiedEvent,
    received_at: DateTime<Utc>,
) -> Result<IngestOutcome, IngestError> {
    let headers = redacted_headers(event.headers());
    let headers_json =
        serde_json::to_string(&headers).expect("a list of string pairs always serialises");
    let routed = source.routes.select(&EventFacts {
        event_type: event.event_type(),
        content_type: event.content_type(),
        headers: &headers,
        body: event.body(),
    });
    let delays = if routed.iter().all(|r| r.delay.is_zero()) {
        Vec::new()
    } else {
        routed.iter().map(|r| r.delay).collect()
    };
    let orderings = if routed.iter().all(|r| r.ordering.is_none()) {
        Vec::new()
    } else {
        routed.iter().map(|r| r.ordering.clone()).collect()
    };
    let pending = PendingEvent {
        id: EventId::generate(),
        source: source.clone(),
        provider_event_id: event.provider_event_id().clone(),
        event_type: event.event_type().map(storable_type),
        received_at,
        content_type: event.content_type().map(str::to_owned),
        headers_json,
        body: event.body().clone(),
        verified_scheme: event.scheme().to_owned(),
        verified_secret_index: i32::try_from(event.secret_index()).unwrap_or(i32::MAX),
        destinations: routed.into_iter().map(|r| r.destination).collect(),
        delays,
        orderings,
    };
    let outcome = match batcher.submit(pending).await? {
        InsertOutcome::Created(id) => IngestOutcome::Accepted(id),
        InsertOutcome::Duplicate(id) => IngestOutcome::Duplicate(id),
    };
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_nul_in_the_type_is_replaced_and_nothing_else_changes() {
        assert_eq!(
            super::storable_type("invoice\0.paid"),
            "invoice\u{FFFD}.paid"
        );
        assert_eq!(super::storable_type("ünïcode.type"), "ünïcode.type");
    }
}
