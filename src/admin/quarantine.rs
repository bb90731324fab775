//! `/admin/v1/quarantine...`: requests to a known source that failed verification; listed,
//! shown, re-verified with the source's current secrets (one or all matching a filter), or
//! discarded.

use std::sync::Arc;

use actix_web::{web, HttpRequest, HttpResponse};
use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::auth::Tenant;
use super::cursor;
use super::error::AdminError;
use super::idempotency::{idempotent, Idem, Reply};
use super::views::HeaderView;
use crate::config::Source;
use crate::http::AppState;
use crate::quarantine::{reverify, Reverified};
use crate::store::{PageCursor, QuarantineFilter, QuarantineSummary, Quarantined, Walk};

/// Requests re-verified per page of a bulk run.
const VERIFY_PAGE: i64 = 100;

#[derive(Debug, Serialize, ToSchema)]
pub struct QuarantineView {
    pub id: String,
    pub source: String,
    pub received_at: DateTime<Utc>,
    /// Why verification refused it, as last checked: `missing_signature`,
    /// `invalid_signature`, `timestamp_out_of_tolerance`, `missing_event_id`,
    /// `invalid_event_id` or `malformed_body`.
    pub reason: String,
    pub message: String,
    /// When it was last verified (on arrival, then at each re-verification), and how often.
    pub checked_at: DateTime<Utc>,
    pub checks: i32,
    pub method: String,
    pub body_bytes: i64,
}

impl From<&QuarantineSummary> for QuarantineView {
    fn from(q: &QuarantineSummary) -> Self {
        Self {
            id: q.id.to_string(),
            source: q.source.clone(),
            received_at: q.received_at,
            reason: q.reason.clone(),
            message: q.message.clone(),
            checked_at: q.checked_at,
            checks: q.checks,
            method: q.method.clone(),
            body_bytes: q.body_bytes,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct QuarantinePage {
    pub data: Vec<QuarantineView>,
    /// Pass back as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct QuarantineDetail {
    #[serde(flatten)]
    pub summary: QuarantineView,
    /// The raw query string the request came with.
    pub query: String,
    /// As received, credential headers (Authorization, Cookie) redacted.
    pub headers: Vec<HeaderView>,
    /// The exact body bytes.
    pub body_base64: String,
    /// The body as text, when it is valid UTF-8.
    pub body: Option<String>,
}

impl From<&Quarantined> for QuarantineDetail {
    fn from(q: &Quarantined) -> Self {
        Self {
            summary: QuarantineView::from(&q.summary),
            query: q.query.clone(),
            headers: q
                .headers
                .iter()
                .map(|(name, value)| HeaderView {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            body_base64: base64::engine::general_purpose::STANDARD.encode(&q.body),
            body: String::from_utf8(q.body.clone()).ok(),
        }
    }
}

/// The list's filters. Text cannot hold a NUL (400).
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct QuarantineQuery {
    #[param(pattern = "^[^\\u0000]*$")]
    pub source: Option<String>,
    /// A rejection code, e.g. `invalid_signature`.
    #[param(pattern = "^[^\\u0000]*$")]
    pub reason: Option<String>,
    /// Received at or after this time (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Received before this time (RFC 3339).
    pub until: Option<DateTime<Utc>>,
    /// Page size: 1 to 500, default 50.
    #[param(minimum = 1, maximum = 500, default = 50)]
    pub limit: Option<i64>,
    /// Opaque: a `next_cursor` this API returned (anything else answers 400).
    pub cursor: Option<String>,
}

/// The bulk re-verification's body: the list's filters; none is the whole quarantine.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"source": "github", "reason": "invalid_signature"}))]
pub struct QuarantineVerifyRequest {
    #[schema(pattern = "^[^\\u0000]*$")]
    pub source: Option<String>,
    #[schema(pattern = "^[^\\u0000]*$")]
    pub reason: Option<String>,
    /// Received at or after this time (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Received before this time (RFC 3339).
    pub until: Option<DateTime<Utc>>,
}

/// What re-verifying one request did.
#[derive(Debug, Serialize, ToSchema)]
pub struct VerifyReply {
    /// `ingested` (stored and routed as if it had arrived then; it left the quarantine),
    /// `duplicate` (already stored: it left the quarantine), `handshake` (a provider
    /// handshake, never an event: it left the quarantine) or `rejected` (it stays, with the
    /// new reason).
    pub outcome: String,
    /// The stored event, for `ingested` and `duplicate`.
    pub event_id: Option<String>,
    /// Why it still fails, for `rejected`.
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// What a bulk re-verification did, by outcome.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct BulkVerifyReply {
    pub ingested: u64,
    pub duplicate: u64,
    pub handshake: u64,
    pub rejected: u64,
    /// Requests of a source that is no longer configured in this tenant: left as they are.
    pub skipped: u64,
}

fn filter(tenant: &Tenant, source: Option<String>, reason: Option<String>) -> QuarantineFilter {
    QuarantineFilter {
        tenant: tenant.as_str().to_owned(),
        source,
        reason,
        since: None,
        until: None,
    }
}

fn parse_id(id: &str) -> Result<Uuid, AdminError> {
    Uuid::parse_str(id).map_err(|_| AdminError::NotFound("quarantined request"))
}

async fn find(state: &AppState, tenant: &Tenant, id: &str) -> Result<Quarantined, AdminError> {
    state
        .store
        .find_quarantined(parse_id(id)?, tenant.as_str())
        .await?
        .ok_or(AdminError::NotFound("quarantined request"))
}

/// The source a quarantined request belongs to, if it is still configured in its tenant.
fn source_of<'a>(state: &'a AppState, q: &QuarantineSummary) -> Option<&'a Arc<Source>> {
    state
        .config
        .sources
        .get(&q.source)
        .filter(|s| s.tenant.as_str() == q.tenant)
}

#[utoipa::path(get, path = "/admin/v1/quarantine", tag = "quarantine", operation_id = "list_quarantine",
    params(QuarantineQuery),
    responses((status = 200, description = "Rejected requests, newest first (no bodies)", body = QuarantinePage),
        (status = 400, description = "`bad_request`: a bad filter, limit or cursor", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    state: web::Data<AppState>,
    tenant: Tenant,
    query: web::Query<QuarantineQuery>,
) -> Result<web::Json<QuarantinePage>, AdminError> {
    let q = query.into_inner();
    let limit = cursor::limit(q.limit)?;
    let after = q.cursor.as_deref().map(cursor::decode).transpose()?;
    let f = QuarantineFilter {
        since: q.since,
        until: q.until,
        ..filter(&tenant, q.source, q.reason)
    };
    let mut rows = state
        .store
        .list_quarantine(&f, after, limit + 1, Walk::NewestFirst)
        .await?;
    let next_cursor = cursor::next_page(&mut rows, limit, position);
    Ok(web::Json(QuarantinePage {
        data: rows.iter().map(QuarantineView::from).collect(),
        next_cursor,
    }))
}

fn position(q: &QuarantineSummary) -> PageCursor {
    PageCursor {
        at: q.received_at,
        id: q.id,
    }
}

#[utoipa::path(get, path = "/admin/v1/quarantine/{id}", tag = "quarantine", operation_id = "get_quarantined",
    params(("id" = String, Path, description = "quarantined request id")),
    responses((status = 200, description = "The request as received, with its headers and body", body = QuarantineDetail),
        (status = 404, description = "`not_found`: no such request in this tenant's quarantine", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn get(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
) -> Result<web::Json<QuarantineDetail>, AdminError> {
    let q = find(&state, &tenant, &path).await?;
    Ok(web::Json(QuarantineDetail::from(&q)))
}

/// Re-verifies one request and takes it out of the quarantine or records its new reason,
/// saving `idem`'s response in the same transaction. The outcome and the reply; `None` when
/// the request is gone meanwhile.
async fn verify_one(
    state: &AppState,
    source: &Arc<Source>,
    q: &Quarantined,
    idem: Option<&Idem>,
) -> Result<Option<(&'static str, Reply)>, AdminError> {
    let tenant = q.summary.tenant.as_str();
    let result = reverify(&state.batcher, source, q).await?;
    let (outcome, event_id, rejected) = match &result {
        Reverified::Ingested {
            event_id,
            duplicate,
        } => (
            if *duplicate { "duplicate" } else { "ingested" },
            Some(event_id.to_string()),
            None,
        ),
        Reverified::Handshake => ("handshake", None, None),
        Reverified::Rejected { reason, message } => ("rejected", None, Some((reason, message))),
    };
    let count = |o: &str| {
        state
            .metrics
            .quarantine
            .with_label_values(&[q.summary.source.as_str(), o])
            .inc();
    };
    let reply = Reply::json(
        200,
        &VerifyReply {
            outcome: outcome.to_owned(),
            event_id,
            reason: rejected.map(|(r, _)| r.clone()),
            message: rejected.map(|(_, m)| m.clone()),
        },
        idem.is_some(),
    );
    let save = idem.map(|i| i.save(reply.status, &reply.body));
    let now = Utc::now();
    let done = match rejected {
        None => {
            count(if outcome == "handshake" {
                "discarded"
            } else {
                "ingested"
            });
            state
                .store
                .remove_quarantined(q.summary.id, tenant, now, save.as_ref())
                .await?
        }
        Some((reason, message)) => {
            count("still_rejected");
            state
                .store
                .recheck_quarantined(q.summary.id, tenant, reason, message, now, save.as_ref())
                .await?
        }
    };
    Ok(done.then_some((outcome, reply)))
}

#[utoipa::path(post, path = "/admin/v1/quarantine/{id}/verify", tag = "quarantine", operation_id = "verify_quarantined",
    params(("id" = String, Path, description = "quarantined request id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retried POST act once")),
    responses((status = 200, description = "Verified again with the source's current secrets and the time it was received", body = VerifyReply),
        (status = 404, description = "`not_found`: no such request in this tenant's quarantine", body = super::views::ErrorBody),
        (status = 409, description = "`conflict`: its source is no longer configured", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn verify(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
    request: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, AdminError> {
    let (state, tenant, body) = (&*state.into_inner(), &tenant, &body);
    let path = &path;
    idempotent(state, tenant, &request, body, move |idem| async move {
        let q = find(state, tenant, path).await?;
        let source = source_of(state, &q.summary).ok_or_else(|| {
            AdminError::Conflict(format!(
                "source {:?} is no longer configured in this tenant",
                q.summary.source
            ))
        })?;
        state.admin_pause.pass().await;
        verify_one(state, source, &q, idem.as_ref())
            .await?
            .map(|(_, reply)| reply)
            .ok_or(AdminError::NotFound("quarantined request"))
    })
    .await
}

#[utoipa::path(post, path = "/admin/v1/quarantine/verify", tag = "quarantine", operation_id = "bulk_verify_quarantine",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retried POST act once")),
    request_body(content = Option<QuarantineVerifyRequest>, description = "The list's filters; none: the tenant's whole quarantine"),
    responses((status = 200, description = "Every matching request verified again, oldest first", body = BulkVerifyReply),
        (status = 400, description = "`bad_request`: the body is not the filters", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn bulk_verify(
    state: web::Data<AppState>,
    tenant: Tenant,
    request: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, AdminError> {
    let (state, tenant, body) = (&*state.into_inner(), &tenant, &body);
    idempotent(state, tenant, &request, body, move |_| async move {
        // No body, or `null`, is no filter at all.
        let req: QuarantineVerifyRequest = if body.iter().all(u8::is_ascii_whitespace) {
            QuarantineVerifyRequest::default()
        } else {
            serde_json::from_slice::<Option<QuarantineVerifyRequest>>(body)
                .map_err(|e| AdminError::BadRequest(format!("body: {e}")))?
                .unwrap_or_default()
        };
        let now = Utc::now();
        // What arrives while the run goes on is not part of it.
        let until = req.until.map_or(now, |u| u.min(now));
        let f = QuarantineFilter {
            since: req.since,
            until: Some(until),
            ..filter(tenant, req.source, req.reason)
        };
        state.admin_pause.pass().await;
        let reply = verify_matching(state, &f).await?;
        Ok(Reply::json(200, &reply, false))
    })
    .await
}

/// Re-verifies every request matching `f`, oldest first, page by page. Each request's
/// outcome is committed on its own, so an interrupted run is resumed by running it again.
pub(crate) async fn verify_matching(
    state: &AppState,
    f: &QuarantineFilter,
) -> Result<BulkVerifyReply, AdminError> {
    let mut reply = BulkVerifyReply::default();
    let mut after = None;
    loop {
        let page = state
            .store
            .list_quarantine(f, after, VERIFY_PAGE, Walk::OldestFirst)
            .await?;
        for row in &page {
            let Some(source) = source_of(state, row) else {
                reply.skipped += 1;
                continue;
            };
            let Some(q) = state.store.find_quarantined(row.id, &row.tenant).await? else {
                continue;
            };
            match verify_one(state, source, &q, None).await? {
                None => {}
                Some(("ingested", _)) => reply.ingested += 1,
                Some(("duplicate", _)) => reply.duplicate += 1,
                Some(("handshake", _)) => reply.handshake += 1,
                Some(_) => reply.rejected += 1,
            }
        }
        if (page.len() as i64) < VERIFY_PAGE {
            return Ok(reply);
        }
        after = page.last().map(position);
    }
}

#[utoipa::path(delete, path = "/admin/v1/quarantine/{id}", tag = "quarantine", operation_id = "discard_quarantined",
    params(("id" = String, Path, description = "quarantined request id")),
    responses((status = 200, description = "Discarded: gone from the quarantine", body = QuarantineView),
        (status = 404, description = "`not_found`: no such request in this tenant's quarantine", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn discard(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
) -> Result<web::Json<QuarantineView>, AdminError> {
    let q = find(&state, &tenant, &path).await?;
    if !state
        .store
        .remove_quarantined(q.summary.id, tenant.as_str(), Utc::now(), None)
        .await?
    {
        return Err(AdminError::NotFound("quarantined request"));
    }
    state
        .metrics
        .quarantine
        .with_label_values(&[q.summary.source.as_str(), "discarded"])
        .inc();
    Ok(web::Json(QuarantineView::from(&q.summary)))
}
