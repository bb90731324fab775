//! Events fetched from a provider's own API, over a call authenticated with the source's API
//! credential (reconciliation, docs/RECOVERY.md). Such an event carries no webhook signature:
//! its authenticity is that of the TLS connection to the provider and of the credential, so
//! it is built here, beside signature verification, and nowhere else. Only `crate::reconcile`
//! calls this, with a body it read from the provider's API response.

use bytes::Bytes;

use super::request::{RequestHeaders, VerifiedEvent};
use crate::domain::ProviderEventId;

/// An event read from the provider's API. `scheme` names the API it came from
/// (`stripe-api`), stored as the event's `verified_scheme` so it is told apart from events
/// whose signature was checked; `secret_index` is 0 (the API credential, not a webhook secret).
pub(crate) fn fetched_from_provider_api(
    scheme: &str,
    provider_event_id: ProviderEventId,
    event_type: Option<String>,
    body: Bytes,
) -> VerifiedEvent {
    let mut headers = RequestHeaders::new();
    headers.push("content-type", "application/json");
    headers.push("x-hookgate-recovered-from", scheme);
    VerifiedEvent {
        headers,
        body,
        provider_event_id,
        event_type,
        scheme: scheme.to_owned(),
        secret_index: 0,
    }
}
