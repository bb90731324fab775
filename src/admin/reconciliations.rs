//! `/admin/v1/sources/{name}/reconciliations`: a source's reconciliation runs against its
//! provider's API (docs/RECOVERY.md), newest first, and a run now.

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Tenant;
use super::error::AdminError;
use super::idempotency::{idempotent, Reply};
use crate::config::Source;
use crate::http::AppState;
use crate::reconcile::{RunBy, RunError};
use crate::store::ReconciliationRun;

#[derive(Debug, Serialize, ToSchema)]
pub struct ReconciliationView {
    pub id: String,
    pub source: String,
    /// `stripe`, `github` or `paddle`.
    pub provider: String,
    /// `schedule` (the source's `interval`) or `admin` (this API, `hookgate reconcile`).
    pub run_by: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// The window the pass covers: the provider's events from `since` to `until`.
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// Pages of the provider's list read.
    pub pages: i64,
    /// Events (GitHub: deliveries; Paddle: failed notifications) the provider listed.
    pub listed: i64,
    /// Of those, the ones not stored for the source.
    pub missing: i64,
    /// Of those, the ones recovered: ingested from the API (Stripe), or sent again by the
    /// provider at hookgate's request (GitHub, Paddle).
    pub recovered: i64,
    /// Calls that failed.
    pub errors: i64,
    pub last_error: Option<String>,
    /// The provider's cursor the next run goes on from; null when the next run starts a new
    /// pass (this one reached the end of the list, or stopped within its first page).
    pub cursor: Option<String>,
}

impl From<ReconciliationRun> for ReconciliationView {
    fn from(r: ReconciliationRun) -> Self {
        Self {
            id: r.id.to_string(),
            source: r.source,
            provider: r.provider,
            run_by: r.run_by,
            started_at: r.started_at,
            finished_at: r.finished_at,
            since: r.since,
            until: r.until,
            pages: r.pages,
            listed: r.listed,
            missing: r.missing,
            recovered: r.recovered,
            errors: r.errors,
            last_error: r.last_error,
            cursor: r.cursor,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReconciliationsReply {
    pub data: Vec<ReconciliationView>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReconciliationsQuery {
    /// The newest runs: 1 to 500, default 50.
    #[param(minimum = 1, maximum = 500, default = 50)]
    pub limit: Option<i64>,
}

/// The run's body; optional, and `null` is the same as none.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"since": "2026-12-01T00:00:00Z"}))]
pub struct ReconciliationRequest {
    /// Start a new pass from this time (RFC 3339, within the source's lookback). Without
    /// it the run goes on from where the last one stopped, or covers the whole lookback.
    pub since: Option<DateTime<Utc>>,
}

/// The tenant's source; another tenant's is "not found".
pub(crate) fn source_in_tenant<'a>(
    state: &'a AppState,
    tenant: &str,
    name: &str,
) -> Result<&'a std::sync::Arc<Source>, AdminError> {
    state
        .config
        .sources
        .get(name)
        .filter(|s| s.tenant.as_str() == tenant)
        .ok_or(AdminError::NotFound("source"))
}

/// The source's newest `limit` runs (the API's and the console's view).
pub(crate) async fn runs(
    state: &AppState,
    source: &str,
    limit: i64,
) -> Result<Vec<ReconciliationView>, AdminError> {
    let runs = state.store.reconciliation_runs(source, limit).await?;
    Ok(runs.into_iter().map(ReconciliationView::from).collect())
}

#[utoipa::path(get, path = "/admin/v1/sources/{name}/reconciliations", tag = "sources", operation_id = "list_reconciliations",
    params(("name" = String, Path, description = "source name"), ReconciliationsQuery),
    responses((status = 200, description = "The source's reconciliation runs, newest first", body = ReconciliationsReply),
        (status = 400, description = "`bad_request`: a limit out of range or an unknown parameter", body = super::views::ErrorBody),
        (status = 404, description = "`not_found`: no such source in this tenant", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
    query: web::Query<ReconciliationsQuery>,
) -> Result<web::Json<ReconciliationsReply>, AdminError> {
    let source = source_in_tenant(&state, tenant.as_str(), &path)?;
    let limit = super::cursor::limit(query.limit)?;
    Ok(web::Json(ReconciliationsReply {
        data: runs(&state, source.name.as_str(), limit).await?,
    }))
}

#[utoipa::path(post, path = "/admin/v1/sources/{name}/reconciliations", tag = "sources", operation_id = "run_reconciliation",
    params(("name" = String, Path, description = "source name"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retried POST act once")),
    request_body(content = Option<ReconciliationRequest>, description = "Optional (`null` is none); `since` starts a new pass from that time"),
    responses((status = 200, description = "The run, finished: what it listed, found missing and recovered", body = ReconciliationView),
        (status = 400, description = "`bad_request`: the body is not a ReconciliationRequest", body = super::views::ErrorBody),
        (status = 404, description = "`not_found`: no such source in this tenant", body = super::views::ErrorBody),
        (status = 409, description = "`conflict`: a run of this source is going on (in any process), or the provider asked to wait (its Retry-After)", body = super::views::ErrorBody),
        (status = 422, description = "`unprocessable`: the source has no `[sources.reconcile]`, or `since` is outside its lookback", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn run(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
    request: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, AdminError> {
    let (state, tenant, body) = (&*state.into_inner(), &tenant, &body);
    let path = &path;
    idempotent(state, tenant, &request, body, move |_idem| async move {
        let source = source_in_tenant(state, tenant.as_str(), path)?;
        let req: ReconciliationRequest = if body.iter().all(u8::is_ascii_whitespace) {
            ReconciliationRequest::default()
        } else {
            serde_json::from_slice::<Option<ReconciliationRequest>>(body)
                .map_err(|e| AdminError::BadRequest(format!("body: {e}")))?
                .unwrap_or_default()
        };
        let run = state
            .provider_reconciler
            .run(source, RunBy::Admin, req.since)
            .await
            .map_err(|e| match e {
                RunError::Store(e) => AdminError::from(e),
                RunError::Busy(_) | RunError::WaitUntil(_) => AdminError::Conflict(e.to_string()),
                RunError::NotConfigured(_) | RunError::SinceOutOfRange { .. } => {
                    AdminError::Unprocessable(e.to_string())
                }
            })?;
        Ok(Reply::json(200, &ReconciliationView::from(run), false))
    })
    .await
}
