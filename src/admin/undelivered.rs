//! `/admin/v1/undelivered...`: every event with a job that has not succeeded (a dead letter,
//! a job held by its destination's pause or circuit breaker, or one still retrying after a
//! failed attempt), with the reason; and a retry of them all, in bounded batches, resumable.

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Tenant;
use super::cursor;
use super::error::AdminError;
use super::idempotency::{idempotent, Reply};
use super::views::{EventSummaryView, JobView, RetriedReply};
use crate::http::AppState;
use crate::store::{BulkProgress, PageCursor, UndeliveredFilter};

/// Jobs retried per committed batch.
const RETRY_BATCH: i64 = 500;

#[derive(Debug, Serialize, ToSchema)]
pub struct UndeliveredView {
    /// `dead_letter`, `paused`, `tripped` or `retrying`.
    pub reason: String,
    #[serde(flatten)]
    pub job: JobView,
    pub event: EventSummaryView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UndeliveredPage {
    pub data: Vec<UndeliveredView>,
    /// Pass back as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// The filters, shared by the list and the retry. Text cannot hold a NUL (400).
#[derive(Debug, Default, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UndeliveredQuery {
    #[param(pattern = "^[^\\u0000]*$")]
    #[schema(pattern = "^[^\\u0000]*$")]
    pub destination: Option<String>,
    #[param(pattern = "^[^\\u0000]*$")]
    #[schema(pattern = "^[^\\u0000]*$")]
    pub source: Option<String>,
    /// Events received at or after this time (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Events received before this time (RFC 3339).
    pub until: Option<DateTime<Utc>>,
    /// Page size: 1 to 500, default 50 (the list only).
    #[param(minimum = 1, maximum = 500, default = 50)]
    pub limit: Option<i64>,
    /// Opaque: a `next_cursor` this API returned (the list only).
    pub cursor: Option<String>,
}

/// The retry's body: the list's filters. Text cannot hold a NUL (400).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UndeliveredRetryRequest {
    #[schema(pattern = "^[^\\u0000]*$")]
    pub destination: Option<String>,
    #[schema(pattern = "^[^\\u0000]*$")]
    pub source: Option<String>,
    /// Events received at or after this time (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Events received before this time (RFC 3339).
    pub until: Option<DateTime<Utc>>,
}

impl UndeliveredQuery {
    pub(crate) fn filter(&self, tenant: &str) -> UndeliveredFilter {
        UndeliveredFilter {
            tenant: tenant.to_owned(),
            destination: self.destination.clone(),
            source: self.source.clone(),
            since: self.since,
            until: self.until,
        }
    }
}

/// One page of the tenant's undelivered jobs, newest first.
pub(crate) async fn page(
    state: &AppState,
    filter: &UndeliveredFilter,
    after: Option<PageCursor>,
    limit: i64,
) -> Result<(Vec<UndeliveredView>, Option<String>), AdminError> {
    let mut rows = state
        .store
        .list_undelivered(filter, after, limit + 1)
        .await?;
    let next_cursor = cursor::next_page(&mut rows, limit, |u| PageCursor {
        at: u.job.job.created_at,
        id: u.job.job.id.as_uuid(),
    });
    let data = rows
        .iter()
        .map(|u| UndeliveredView {
            reason: u.reason.as_str().to_owned(),
            job: JobView::new(&u.job.job, None),
            event: EventSummaryView::from(&u.job.event),
        })
        .collect();
    Ok((data, next_cursor))
}

/// Retries every undelivered job matching `filter`, batch by batch, from `progress`. The
/// first batch's time is kept in the progress, so a resumed run leaves alone what the
/// interrupted one already retried.
pub(crate) async fn retry_matching(
    state: &AppState,
    filter: &UndeliveredFilter,
    mut progress: BulkProgress,
    key: Option<crate::store::ProgressKey<'_>>,
) -> Result<BulkProgress, AdminError> {
    let now = Utc::now();
    let before = progress.after.map_or(now, |p| p.at);
    progress.after = Some(PageCursor {
        at: before,
        id: uuid::Uuid::nil(),
    });
    loop {
        let next = state
            .store
            .retry_undelivered_batch(filter, before, progress, RETRY_BATCH, now, key)
            .await?;
        let finished = next.done - progress.done < RETRY_BATCH;
        progress = next;
        if finished {
            return Ok(progress);
        }
    }
}

#[utoipa::path(get, path = "/admin/v1/undelivered", tag = "undelivered", operation_id = "list_undelivered",
    params(UndeliveredQuery),
    responses((status = 200, description = "Jobs not delivered, newest first, each with its reason and event", body = UndeliveredPage),
        (status = 400, description = "`bad_request`: a bad filter, limit or cursor", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    state: web::Data<AppState>,
    tenant: Tenant,
    query: web::Query<UndeliveredQuery>,
) -> Result<web::Json<UndeliveredPage>, AdminError> {
    let q = query.into_inner();
    let limit = cursor::limit(q.limit)?;
    let after = q.cursor.as_deref().map(cursor::decode).transpose()?;
    let (data, next_cursor) = page(&state, &q.filter(tenant.as_str()), after, limit).await?;
    Ok(web::Json(UndeliveredPage { data, next_cursor }))
}

#[utoipa::path(post, path = "/admin/v1/undelivered/retry", tag = "undelivered", operation_id = "retry_undelivered",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retried POST act once, resuming an interrupted run")),
    request_body(content = Option<UndeliveredRetryRequest>, description = "The list's filters; none: every undelivered job of the tenant"),
    responses((status = 202, description = "Dead letters are pending again and retrying jobs due now; held jobs stay held until their destination resumes", body = RetriedReply),
        (status = 400, description = "`bad_request`: the body is not the filters", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn retry(
    state: web::Data<AppState>,
    tenant: Tenant,
    request: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, AdminError> {
    let (state, tenant, body) = (&*state.into_inner(), &tenant, &body);
    idempotent(state, tenant, &request, body, move |idem| async move {
        // No body, or `null`, is no filter at all.
        let req: UndeliveredRetryRequest = if body.iter().all(u8::is_ascii_whitespace) {
            UndeliveredRetryRequest::default()
        } else {
            serde_json::from_slice::<Option<UndeliveredRetryRequest>>(body)
                .map_err(|e| AdminError::BadRequest(format!("body: {e}")))?
                .unwrap_or_default()
        };
        let filter = UndeliveredQuery {
            destination: req.destination,
            source: req.source,
            since: req.since,
            until: req.until,
            ..UndeliveredQuery::default()
        }
        .filter(tenant.as_str());
        let progress: BulkProgress = idem.as_ref().and_then(|i| i.progress).unwrap_or_default();
        state.admin_pause.pass().await;
        let key = idem.as_ref().map(|i| i.progress_key());
        let progress = retry_matching(state, &filter, progress, key).await?;
        Ok(Reply::json(
            202,
            &RetriedReply {
                retried: progress.done,
            },
            false,
        ))
    })
    .await
}
