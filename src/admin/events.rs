//! `/admin/v1/events...` and `/admin/v1/replay`.

use std::collections::BTreeMap;

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::Utc;

use super::auth::Tenant;
use super::cursor;
use super::error::AdminError;
use super::idempotency::{idempotent, Reply};
use super::views::{
    BulkReplayRequest, DryRunReply, EventDetail, EventPage, EventSummaryView, EventsQuery, JobView,
    JobsReply, ReplayRequest, ReplayedReply,
};
use crate::config::Source;
use crate::domain::{EventId, JobId};
use crate::http::AppState;
use crate::queue::JobStatus;
use crate::routing::{JobOrdering, Route};
use crate::store::{
    EventFilter, EventStatus, NewJob, PageCursor, ReplayRouting, StoredEvent, StoredJob,
};

/// The header carrying a raw body's original Content-Type.
pub const ORIGINAL_CONTENT_TYPE: &str = "Hookgate-Original-Content-Type";

/// Events replayed per committed batch: small enough that ingestion never waits long.
const REPLAY_BATCH: i64 = 200;

fn parse_status(s: Option<&str>) -> Result<Option<EventStatus>, AdminError> {
    s.map(|s| {
        EventStatus::parse(s).ok_or_else(|| {
            AdminError::BadRequest(format!(
                "status {s:?} is not one of pending, in_progress, succeeded, failed, no_route"
            ))
        })
    })
    .transpose()
}

/// The event, if it exists and belongs to the tenant; another tenant's is "not found" too.
pub(crate) async fn event_in_tenant(
    state: &AppState,
    tenant: &Tenant,
    id: &str,
) -> Result<StoredEvent, AdminError> {
    let id = EventId::parse(id).map_err(|_| AdminError::NotFound("event"))?;
    match state.store.get_event(id).await? {
        Some(e) if e.tenant == tenant.as_str() => Ok(e),
        _ => Err(AdminError::NotFound("event")),
    }
}

#[utoipa::path(get, path = "/admin/v1/events", tag = "events", params(EventsQuery),
    responses((status = 200, description = "A page of events, newest first", body = EventPage),
        (status = 400, description = "`bad_request`: a bad limit, cursor, status or date, or an unknown parameter", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_events(
    state: web::Data<AppState>,
    tenant: Tenant,
    query: web::Query<EventsQuery>,
) -> Result<web::Json<EventPage>, AdminError> {
    let q = query.into_inner();
    let limit = cursor::limit(q.limit)?;
    let after = q.cursor.as_deref().map(cursor::decode).transpose()?;
    let filter = EventFilter {
        tenant: tenant.as_str().to_owned(),
        source: q.source,
        event_type: q.event_type,
        provider_event_id: q.provider_event_id,
        status: parse_status(q.status.as_deref())?,
        received_from: q.received_from,
        received_to: q.received_to,
    };
    let mut rows = state.store.list_events(&filter, after, limit + 1).await?;
    let next_cursor = cursor::next_page(&mut rows, limit, |e| PageCursor {
        at: e.received_at,
        id: e.id.as_uuid(),
    });
    Ok(web::Json(EventPage {
        data: rows.iter().map(EventSummaryView::from).collect(),
        next_cursor,
    }))
}

#[utoipa::path(get, path = "/admin/v1/events/{id}", tag = "events",
    params(("id" = String, Path, description = "hookgate event id")),
    responses((status = 200, description = "The event, its jobs and their attempts", body = EventDetail),
        (status = 404, description = "`not_found`: no such event in this tenant", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_event(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
) -> Result<web::Json<EventDetail>, AdminError> {
    Ok(web::Json(event_detail(&state, &tenant, &path).await?))
}

/// An event with its jobs and each job's attempt history (the API and the console).
pub(crate) async fn event_detail(
    state: &AppState,
    tenant: &Tenant,
    id: &str,
) -> Result<EventDetail, AdminError> {
    let event = event_in_tenant(state, tenant, id).await?;
    let mut jobs = Vec::new();
    for job in state.store.jobs_for_event(event.id).await? {
        let history = state.store.attempts_for_job(job.id).await?;
        jobs.push(JobView::new(&job, Some(&history)));
    }
    Ok(EventDetail::new(&event, jobs))
}

#[utoipa::path(get, path = "/admin/v1/events/{id}/raw", tag = "events",
    params(("id" = String, Path, description = "hookgate event id")),
    responses((status = 200, description = "The exact stored body bytes, as a download",
        content_type = "application/octet-stream", body = Vec<u8>,
        headers(("Content-Disposition" = String, description = "`attachment`, with a file name"),
            ("Hookgate-Original-Content-Type" = String, description = "The Content-Type the event arrived with, when it had one"))),
        (status = 404, description = "`not_found`: no such event in this tenant", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn raw_event(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
) -> Result<HttpResponse, AdminError> {
    let event = event_in_tenant(&state, &tenant, &path).await?;
    // A download, never a page: the sender chose the Content-Type, and a browser shown
    // their `text/html` under the gateway's origin would run it. The original type travels
    // in a header of its own.
    let mut response = HttpResponse::Ok();
    response
        .content_type("application/octet-stream")
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{}.bin\"", event.id),
        ))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"));
    if let Some(original) = &event.content_type {
        response.insert_header((ORIGINAL_CONTENT_TYPE, original.as_str()));
    }
    Ok(response.body(event.body))
}

/// The destinations a replay of `event` goes to: those requested, which must all be routed
/// from its source, or by default those its source's routes choose for it today (a replay is
/// due at once, whatever a route's delay). Each at most once, in the source's order, however
/// often the request names it: one job per destination.
pub(crate) fn replay_destinations(
    state: &AppState,
    event: &StoredEvent,
    requested: Option<Vec<String>>,
) -> Result<Vec<String>, AdminError> {
    let source = state.config.sources.get(&event.source);
    let routed: Vec<String> = source
        .map(|s| s.destinations.iter().map(|d| d.to_string()).collect())
        .unwrap_or_default();
    if routed.is_empty() {
        return Err(AdminError::Unprocessable(format!(
            "source {} has no destinations to replay to",
            event.source
        )));
    }
    let destinations: Vec<String> = match requested {
        None => source
            .map(|s| s.routes.select_stored(event))
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.destination.to_string())
            .collect(),
        Some(list) => {
            if let Some(bad) = list.iter().find(|d| !routed.contains(d)) {
                return Err(AdminError::Unprocessable(format!(
                    "destination {bad:?} is not one of source {}'s destinations",
                    event.source
                )));
            }
            routed.into_iter().filter(|d| list.contains(d)).collect()
        }
    };
    if destinations.is_empty() {
        return Err(AdminError::Unprocessable(format!(
            "no route of source {} matches this event today: name the destinations to replay it to",
            event.source
        )));
    }
    Ok(destinations)
}

/// One new job per destination for a replay of `event`, each joining the end of its key's
/// line when its route orders the destination's jobs.
pub(crate) fn replay_jobs(
    state: &AppState,
    event: &StoredEvent,
    destinations: Vec<String>,
) -> Vec<NewJob> {
    let source = state.config.sources.get(&event.source);
    destinations
        .into_iter()
        .map(|destination| NewJob {
            id: JobId::for_event(event.id),
            event_id: event.id,
            ordering: source.and_then(|s| s.routes.ordering_for_stored(event, &destination)),
            destination,
        })
        .collect()
}

/// A bulk replay's routing: each event goes where its source's routes send it today.
struct TenantRoutes<'a> {
    sources: BTreeMap<&'a str, &'a Source>,
}

impl ReplayRouting for TenantRoutes<'_> {
    fn fixed(&self, source: &str) -> Option<Vec<String>> {
        match self.sources.get(source) {
            None => Some(Vec::new()),
            Some(s) if s.routes.routes().iter().any(Route::is_conditional) => None,
            // Each event's ordering key is read from the event itself.
            Some(s) if s.routes.is_ordered() => None,
            Some(s) => Some(s.destinations.iter().map(|d| d.to_string()).collect()),
        }
    }

    fn route(&self, event: &StoredEvent) -> Vec<String> {
        self.route_ordered(event)
            .into_iter()
            .map(|(d, _)| d)
            .collect()
    }

    fn route_ordered(&self, event: &StoredEvent) -> Vec<(String, Option<JobOrdering>)> {
        self.sources
            .get(event.source.as_str())
            .map(|s| s.routes.select_stored(event))
            .unwrap_or_default()
            .into_iter()
            .map(|r| (r.destination.to_string(), r.ordering))
            .collect()
    }
}

/// A job as `create_jobs` will write it, so the response can be saved in that transaction.
pub(crate) fn pending_job(job: &NewJob, now: chrono::DateTime<Utc>) -> StoredJob {
    StoredJob {
        id: job.id,
        event_id: job.event_id,
        destination: job.destination.clone(),
        status: JobStatus::Pending,
        attempts: 0,
        next_attempt_at: now,
        locked_until: None,
        last_error: None,
        created_at: now,
        updated_at: now,
        discarded_at: None,
        ordering_key: job.ordering.as_ref().map(|o| o.key.clone()),
    }
}

#[utoipa::path(post, path = "/admin/v1/events/{id}/replay", tag = "events",
    params(("id" = String, Path, description = "hookgate event id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retried POST act once")),
    request_body(content = Option<ReplayRequest>, description = "Optional; without it, the destinations the source's routes choose for the event today"),
    responses((status = 202, description = "One new pending job per destination", body = JobsReply),
        (status = 400, description = "`bad_request`: the body is not a ReplayRequest", body = super::views::ErrorBody),
        (status = 404, description = "`not_found`: no such event in this tenant", body = super::views::ErrorBody),
        (status = 422, description = "`unprocessable`: a destination the source does not route to, a source without destinations, or no route matching the event when none is named", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn replay_event(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
    request: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, AdminError> {
    let (state, tenant, body) = (&*state.into_inner(), &tenant, &body);
    let path = &path;
    idempotent(state, tenant, &request, body, move |idem| async move {
        let event = event_in_tenant(state, tenant, path).await?;
        let req: ReplayRequest = if body.iter().all(u8::is_ascii_whitespace) {
            ReplayRequest::default()
        } else {
            serde_json::from_slice(body)
                .map_err(|e| AdminError::BadRequest(format!("body: {e}")))?
        };
        let destinations = replay_destinations(state, &event, req.destinations)?;
        let now = Utc::now();
        let jobs = replay_jobs(state, &event, destinations);
        let reply = Reply::json(
            202,
            &JobsReply {
                jobs: jobs
                    .iter()
                    .map(|j| JobView::new(&pending_job(j, now), None))
                    .collect(),
            },
            idem.is_some(),
        );
        state.admin_pause.pass().await;
        let save = idem.as_ref().map(|i| i.save(reply.status, &reply.body));
        state.store.create_jobs(&jobs, now, save.as_ref()).await?;
        Ok(reply)
    })
    .await
}

#[utoipa::path(post, path = "/admin/v1/replay", tag = "events",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retried POST act once, resuming an interrupted run")),
    request_body = BulkReplayRequest,
    responses((status = 202, description = "Replayed", body = ReplayedReply),
        (status = 200, description = "`dry_run`: what would be replayed", body = DryRunReply),
        (status = 400, description = "`bad_request`: no filter, a bad status or date, or not a BulkReplayRequest", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn bulk_replay(
    state: web::Data<AppState>,
    tenant: Tenant,
    request: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, AdminError> {
    let (state, tenant, body) = (&*state.into_inner(), &tenant, &body);
    idempotent(state, tenant, &request, body, move |idem| async move {
        let req: BulkReplayRequest = serde_json::from_slice(body)
            .map_err(|e| AdminError::BadRequest(format!("body: {e}")))?;
        let filter = EventFilter {
            tenant: tenant.as_str().to_owned(),
            source: req.source,
            event_type: req.event_type,
            provider_event_id: req.provider_event_id,
            status: parse_status(req.status.as_deref())?,
            received_from: req.received_from,
            received_to: req.received_to,
        };
        let filtered = filter.source.is_some()
            || filter.event_type.is_some()
            || filter.provider_event_id.is_some()
            || filter.status.is_some()
            || filter.received_from.is_some()
            || filter.received_to.is_some();
        if !filtered {
            return Err(AdminError::BadRequest(
                "give at least one filter: source, event_type, provider_event_id, status, received_from or received_to".into(),
            ));
        }
        if req.dry_run {
            let matched = state.store.count_matching_events(&filter).await?;
            return Ok(Reply::json(200, &DryRunReply { dry_run: true, matched }, false));
        }
        let routes = TenantRoutes {
            sources: state
                .config
                .sources
                .values()
                .filter(|s| s.tenant.as_str() == tenant.as_str())
                .map(|s| (s.name.as_str(), &**s))
                .collect(),
        };
        let now = Utc::now();
        let mut progress = idem.as_ref().and_then(|i| i.progress).unwrap_or_default();
        state.admin_pause.pass().await;
        loop {
            let key = idem.as_ref().map(|i| i.progress_key());
            let next = state
                .store
                .replay_events_batch(&filter, progress, REPLAY_BATCH, &routes, now, key)
                .await?;
            let finished = next.done - progress.done < REPLAY_BATCH;
            progress = next;
            if finished {
                break;
            }
        }
        Ok(Reply::json(202, &ReplayedReply { replayed: progress.done }, false))
    })
    .await
}
