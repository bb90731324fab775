//! `GET /admin/v1/sources`: the tenant's sources as configured, with what their provider
//! definition reads: where the dedupe id comes from (a header, a body field, or a digest for
//! providers that send none), the type, the signature, and the handshakes answered.

use actix_web::web;
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::Tenant;
use super::error::AdminError;
use crate::http::AppState;
use crate::verify::{Location, SignatureSource};

#[derive(Debug, Serialize, ToSchema)]
pub struct SourceView {
    /// The ingest URL is `/webhooks/{name}`.
    pub name: String,
    /// The provider the configuration names (possibly an alias).
    pub provider: String,
    /// The definition that verifies it (the canonical provider name).
    pub definition: String,
    /// Where the dedupe id is read, in order: `header:Name`, `json:/pointer`, `query:name`,
    /// `sha256:body` or `sha256:<locations>` (a digest, for providers that send no id).
    pub event_id: Vec<String>,
    /// Where the event type is read, in order (empty: none).
    pub event_type: Vec<String>,
    /// The signature algorithms accepted, e.g. `hmac-sha256`, `ed25519`, `token`.
    pub algorithms: Vec<String>,
    /// `header:Name` for each header the signature may come in, or `json:/pointer`.
    pub signature_from: Vec<String>,
    /// The timestamp tolerance in seconds, for providers that sign a time.
    pub timestamp_tolerance_seconds: Option<i64>,
    /// Handshakes answered without storing anything, as `METHOD` and how each is recognised.
    pub handshakes: Vec<String>,
    /// How many secrets (or public keys) are live; never the values.
    pub secrets: usize,
    pub public_url: Option<String>,
    pub destinations: Vec<String>,
    /// Whether the source is reconciled against its provider's API (`[sources.reconcile]`);
    /// its runs are at `/admin/v1/sources/{name}/reconciliations`.
    pub reconciled: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SourcesReply {
    pub data: Vec<SourceView>,
}

#[utoipa::path(get, path = "/admin/v1/sources", tag = "sources", operation_id = "list_sources",
    responses((status = 200, description = "The tenant's sources, by name", body = SourcesReply)),
    security(("bearer" = [])))]
pub async fn list(
    state: web::Data<AppState>,
    tenant: Tenant,
) -> Result<web::Json<SourcesReply>, AdminError> {
    Ok(web::Json(SourcesReply {
        data: views(&state, tenant.as_str()),
    }))
}

/// The tenant's sources, by name (the API's and the console's view).
pub(crate) fn views(state: &AppState, tenant: &str) -> Vec<SourceView> {
    let mut data: Vec<SourceView> = state
        .config
        .sources
        .values()
        .filter(|s| s.tenant.as_str() == tenant)
        .map(|s| {
            let def = s.verifier.definition();
            let locations = |l: &[Location]| l.iter().map(Location::to_string).collect();
            SourceView {
                name: s.name.to_string(),
                provider: s.provider.clone(),
                definition: def.name.clone(),
                event_id: locations(&def.event_id),
                event_type: locations(&def.event_type),
                algorithms: def
                    .signature
                    .algorithms()
                    .into_iter()
                    .map(|a| a.name().to_owned())
                    .collect(),
                signature_from: match &def.signature.source {
                    SignatureSource::Headers { names, .. } => {
                        names.iter().map(|n| format!("header:{n}")).collect()
                    }
                    SignatureSource::Body(p) => vec![format!("json:{p}")],
                },
                timestamp_tolerance_seconds: def.timestamp.as_ref().map(|t| t.tolerance_seconds),
                handshakes: def
                    .handshakes
                    .iter()
                    .map(|h| {
                        let when: Vec<String> = h
                            .when
                            .iter()
                            .map(|(l, v)| format!("{l}={}", v.as_deref().unwrap_or("*")))
                            .collect();
                        format!("{} {}", h.method, when.join(" "))
                    })
                    .collect(),
                secrets: s.verifier.key_count(),
                public_url: s.verifier.public_url().map(str::to_owned),
                destinations: s.destinations.iter().map(|d| d.to_string()).collect(),
                reconciled: s.reconcile.is_some(),
            }
        })
        .collect();
    data.sort_by(|a, b| a.name.cmp(&b.name));
    data
}
