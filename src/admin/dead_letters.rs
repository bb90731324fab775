//! `/admin/v1/dead-letters...`: failed jobs, retried or discarded by an operator.

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::Utc;

use super::auth::Tenant;
use super::cursor;
use super::error::AdminError;
use super::idempotency::{idempotent, Reply};
use super::views::{
    BulkRetryRequest, DeadLetterPage, DeadLetterView, DeadLettersQuery, EventSummaryView, JobView,
    RetriedReply,
};
use crate::domain::JobId;
use crate::http::AppState;
use crate::queue::JobStatus;
use crate::store::{BulkProgress, DeadLetterFilter, JobWithEvent, PageCursor};

const RETRY_BATCH: i64 = 500;

pub(crate) async fn job_in_tenant(
    state: &AppState,
    tenant: &Tenant,
    id: &str,
) -> Result<JobWithEvent, AdminError> {
    let id = uuid::Uuid::parse_str(id).map_err(|_| AdminError::NotFound("job"))?;
    state
        .store
        .find_job(JobId::from_uuid(id), tenant.as_str())
        .await?
        .ok_or(AdminError::NotFound("job"))
}

pub(crate) fn not_a_dead_letter(j: &JobWithEvent) -> AdminError {
    AdminError::Conflict(format!(
        "job {} is {}{}, not a dead letter",
        j.job.id,
        j.job.status.as_str(),
        if j.job.discarded_at.is_some() {
            " and discarded"
        } else {
            ""
        }
    ))
}

#[utoipa::path(get, path = "/admin/v1/dead-letters", tag = "dead-letters", operation_id = "list_dead_letters",
    params(DeadLettersQuery),
    responses((status = 200, description = "A page of dead letters, most recently failed first", body = DeadLetterPage),
        (status = 400, description = "`bad_request`: a bad limit or cursor, or an unknown parameter", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    state: web::Data<AppState>,
    tenant: Tenant,
    query: web::Query<DeadLettersQuery>,
) -> Result<web::Json<DeadLetterPage>, AdminError> {
    let q = query.into_inner();
    let limit = cursor::limit(q.limit)?;
    let after = q.cursor.as_deref().map(cursor::decode).transpose()?;
    let filter = DeadLetterFilter {
        tenant: tenant.as_str().to_owned(),
        destination: q.destination,
        source: q.source,
        failed_before: None,
    };
    let (data, next_cursor) = dead_letter_page(&state, &filter, after, limit).await?;
    Ok(web::Json(DeadLetterPage { data, next_cursor }))
}

/// One page of dead letters with their history, and the cursor of the next page.
pub(crate) async fn dead_letter_page(
    state: &AppState,
    filter: &DeadLetterFilter,
    after: Option<PageCursor>,
    limit: i64,
) -> Result<(Vec<DeadLetterView>, Option<String>), AdminError> {
    let mut rows = state
        .store
        .list_dead_letters(filter, after, limit + 1)
        .await?;
    let next_cursor = cursor::next_page(&mut rows, limit, |d| PageCursor {
        at: d.job.updated_at,
        id: d.job.id.as_uuid(),
    });
    let mut data = Vec::with_capacity(rows.len());
    for row in &rows {
        let history = state.store.attempts_for_job(row.job.id).await?;
        data.push(DeadLetterView {
            job: JobView::new(&row.job, Some(&history)),
            event: EventSummaryView::from(&row.event),
        });
    }
    Ok((data, next_cursor))
}

/// Retries every dead letter matching `filter`, batch by batch, from `progress`.
pub(crate) async fn retry_matching(
    state: &AppState,
    filter: &DeadLetterFilter,
    mut progress: BulkProgress,
    key: Option<crate::store::ProgressKey<'_>>,
) -> Result<BulkProgress, AdminError> {
    let now = filter.failed_before.unwrap_or_else(Utc::now);
    loop {
        let next = state
            .store
            .retry_dead_letters_batch(filter, progress, RETRY_BATCH, now, key)
            .await?;
        let finished = next.done - progress.done < RETRY_BATCH;
        progress = next;
        if finished {
            return Ok(progress);
        }
    }
}

#[utoipa::path(post, path = "/admin/v1/dead-letters/{job_id}/retry", tag = "dead-letters", operation_id = "retry_dead_letter",
    params(("job_id" = String, Path, description = "job id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retried POST act once")),
    responses((status = 202, description = "Pending again, due now", body = JobView),
        (status = 404, description = "`not_found`: no such job in this tenant", body = super::views::ErrorBody),
        (status = 409, description = "`conflict`: the job is not a dead letter", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn retry(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
    request: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, AdminError> {
    let (state, tenant, body) = (&*state.into_inner(), &tenant, &body);
    let path = &path;
    idempotent(state, tenant, &request, body, move |idem| async move {
        let found = job_in_tenant(state, tenant, path).await?;
        if found.job.status != JobStatus::Failed || found.job.discarded_at.is_some() {
            return Err(not_a_dead_letter(&found));
        }
        let now = Utc::now();
        // The job as the retry leaves it: pending now, with a fresh schedule.
        let mut job = found.job.clone();
        job.status = JobStatus::Pending;
        job.attempts = 0;
        job.next_attempt_at = now;
        job.updated_at = now;
        let reply = Reply::json(202, &JobView::new(&job, None), idem.is_some());
        state.admin_pause.pass().await;
        let save = idem.as_ref().map(|i| i.save(reply.status, &reply.body));
        if !state
            .store
            .retry_dead_letter(job.id, tenant.as_str(), now, save.as_ref())
            .await?
        {
            return Err(not_a_dead_letter(&found));
        }
        Ok(reply)
    })
    .await
}

#[utoipa::path(post, path = "/admin/v1/dead-letters/retry", tag = "dead-letters", operation_id = "bulk_retry_dead_letters",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retried POST act once")),
    request_body = BulkRetryRequest,
    responses((status = 202, description = "Retried", body = RetriedReply),
        (status = 400, description = "`bad_request`: no filter, or not a BulkRetryRequest", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn bulk_retry(
    state: web::Data<AppState>,
    tenant: Tenant,
    request: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, AdminError> {
    let (state, tenant, body) = (&*state.into_inner(), &tenant, &body);
    idempotent(state, tenant, &request, body, move |idem| async move {
        let req: BulkRetryRequest = serde_json::from_slice(body)
            .map_err(|e| AdminError::BadRequest(format!("body: {e}")))?;
        if req.destination.is_none() && req.source.is_none() {
            return Err(AdminError::BadRequest(
                "give at least one filter: destination or source".into(),
            ));
        }
        let now = Utc::now();
        let filter = DeadLetterFilter {
            tenant: tenant.as_str().to_owned(),
            destination: req.destination,
            source: req.source,
            failed_before: Some(now),
        };
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

#[utoipa::path(delete, path = "/admin/v1/dead-letters/{job_id}", tag = "dead-letters", operation_id = "discard_dead_letter",
    params(("job_id" = String, Path, description = "job id")),
    responses((status = 200, description = "Discarded: kept in history, out of the list", body = JobView),
        (status = 404, description = "`not_found`: no such job in this tenant", body = super::views::ErrorBody),
        (status = 409, description = "`conflict`: the job is not a dead letter", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn discard(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
) -> Result<web::Json<JobView>, AdminError> {
    let found = job_in_tenant(&state, &tenant, &path).await?;
    if !state
        .store
        .discard_dead_letter(found.job.id, tenant.as_str(), Utc::now())
        .await?
    {
        return Err(not_a_dead_letter(&found));
    }
    let after = job_in_tenant(&state, &tenant, &path).await?;
    let history = state.store.attempts_for_job(after.job.id).await?;
    Ok(web::Json(JobView::new(&after.job, Some(&history))))
}
