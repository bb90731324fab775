//! Re-verification: a quarantined request checked again with its source's current secrets.

use std::sync::Arc;

use crate::config::Source;
use crate::domain::EventId;
use crate::ingest::{ingest, IngestBatcher, IngestError, IngestOutcome};
use crate::store::Quarantined;
use crate::verify::{RequestHeaders, Unverified, Verified};

/// What re-verification made of a quarantined request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reverified {
    /// It verifies now and is stored (or was already: `duplicate`), as if it had arrived
    /// when it did: same dedupe key, same routing, same received time.
    Ingested { event_id: EventId, duplicate: bool },
    /// It is a provider handshake: long unanswerable, and never an event.
    Handshake,
    /// It still fails, for this reason.
    Rejected { reason: String, message: String },
}

/// Verifies `q` again with `source`'s secrets as configured now, checking its timestamp
/// against the time it was received (not now), and ingests it if it verifies. The caller
/// takes it out of the quarantine or records the new reason.
pub async fn reverify(
    batcher: &IngestBatcher,
    source: &Arc<Source>,
    q: &Quarantined,
) -> Result<Reverified, IngestError> {
    let headers: RequestHeaders = q.headers.iter().map(|(n, v)| (n, v.as_str())).collect();
    let request = Unverified::new(headers, bytes::Bytes::from(q.body.clone()))
        .with_target(&q.summary.method, &q.query);
    let received_at = q.summary.received_at;
    match request.verify_or_return(&source.verifier, received_at.timestamp()) {
        Ok(Verified::Event(event)) => {
            let (event_id, duplicate) = match ingest(batcher, source, event, received_at).await? {
                IngestOutcome::Accepted(id) => (id, false),
                IngestOutcome::Duplicate(id) => (id, true),
            };
            Ok(Reverified::Ingested {
                event_id,
                duplicate,
            })
        }
        Ok(Verified::Challenge(_)) => Ok(Reverified::Handshake),
        Err(rejected) => Ok(Reverified::Rejected {
            reason: rejected.error.code().to_owned(),
            message: super::storable(&rejected.error.to_string()),
        }),
    }
}
