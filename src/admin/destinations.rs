//! `/admin/v1/destinations...`: each destination the tenant's sources route to, its state
//! and queue, and pause and resume. A paused destination's jobs are held: no process claims
//! them, none fails or expires, and new events still queue for it; on resume they are
//! delivered oldest first.

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::Tenant;
use super::error::AdminError;
use super::idempotency::{idempotent, Reply};
use crate::http::AppState;
use crate::store::DestinationStats;

/// The window of the success rate.
const RECENT_WINDOW: chrono::TimeDelta = chrono::TimeDelta::hours(1);

#[derive(Debug, Serialize, ToSchema)]
pub struct DestinationView {
    pub name: String,
    /// `active`, `paused` (by an operator) or `tripped` (by its circuit breaker); a pause
    /// shows over a trip.
    pub state: String,
    /// When an operator paused it, while it is paused.
    pub paused_at: Option<DateTime<Utc>>,
    /// When its circuit breaker tripped, while it is tripped, and when the next probe
    /// delivery is due.
    pub tripped_at: Option<DateTime<Utc>>,
    pub next_probe_at: Option<DateTime<Utc>>,
    /// The tenant's pending jobs for it that are due now (held ones included).
    pub jobs_due: i64,
    /// How long the oldest of them has been due, in seconds.
    pub oldest_due_age_seconds: Option<i64>,
    /// Attempts in the last hour (of the tenant's jobs), and how many succeeded.
    pub recent_attempts: i64,
    pub recent_successes: i64,
    /// `recent_successes / recent_attempts`; null without attempts.
    pub recent_success_rate: Option<f64>,
    /// Failed attempts since the last success.
    pub failure_streak: i64,
}

impl DestinationView {
    /// `breaker`: whether the destination has a circuit breaker configured (a trip left over
    /// from before it was removed holds nothing).
    fn new(name: &str, s: &DestinationStats, breaker: bool, now: DateTime<Utc>) -> Self {
        let tripped_at = s.tripped_at.filter(|_| breaker);
        Self {
            name: name.to_owned(),
            state: state_name(s.paused_at, tripped_at).to_owned(),
            paused_at: s.paused_at,
            tripped_at,
            next_probe_at: s.probe_at.filter(|_| tripped_at.is_some()),
            jobs_due: s.jobs_due,
            oldest_due_age_seconds: s.oldest_due_at.map(|t| (now - t).num_seconds().max(0)),
            recent_attempts: s.recent_attempts,
            recent_successes: s.recent_successes,
            recent_success_rate: (s.recent_attempts > 0)
                .then(|| s.recent_successes as f64 / s.recent_attempts as f64),
            failure_streak: s.failure_streak,
        }
    }
}

fn state_name(paused_at: Option<DateTime<Utc>>, tripped_at: Option<DateTime<Utc>>) -> &'static str {
    match (paused_at, tripped_at) {
        (Some(_), _) => "paused",
        (None, Some(_)) => "tripped",
        (None, None) => "active",
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DestinationsReply {
    pub data: Vec<DestinationView>,
}

/// The destinations the tenant's sources route to, by name.
pub(crate) fn names(state: &AppState, tenant: &str) -> Vec<String> {
    let mut names: Vec<String> = state
        .config
        .sources
        .values()
        .filter(|s| s.tenant.as_str() == tenant)
        .flat_map(|s| s.destinations.iter().map(|d| d.to_string()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The destination, if one of the tenant's sources routes to it; another's is "not found".
pub(crate) fn in_tenant(state: &AppState, tenant: &str, name: &str) -> Result<String, AdminError> {
    names(state, tenant)
        .into_iter()
        .find(|n| n == name)
        .ok_or(AdminError::NotFound("destination"))
}

pub(crate) async fn view(
    state: &AppState,
    tenant: &str,
    name: &str,
) -> Result<DestinationView, AdminError> {
    let now = Utc::now();
    let stats = state
        .store
        .destination_stats(name, tenant, now - RECENT_WINDOW, now)
        .await?;
    let breaker = state
        .config
        .destinations
        .get(name)
        .is_some_and(|d| d.circuit.is_some());
    Ok(DestinationView::new(name, &stats, breaker, now))
}

#[utoipa::path(get, path = "/admin/v1/destinations", tag = "destinations", operation_id = "list_destinations",
    responses((status = 200, description = "The destinations the tenant's sources route to, by name", body = DestinationsReply)),
    security(("bearer" = [])))]
pub async fn list(
    state: web::Data<AppState>,
    tenant: Tenant,
) -> Result<web::Json<DestinationsReply>, AdminError> {
    let mut data = Vec::new();
    for name in names(&state, tenant.as_str()) {
        data.push(view(&state, tenant.as_str(), &name).await?);
    }
    Ok(web::Json(DestinationsReply { data }))
}

#[utoipa::path(get, path = "/admin/v1/destinations/{name}", tag = "destinations", operation_id = "get_destination",
    params(("name" = String, Path, description = "destination name")),
    responses((status = 200, description = "The destination", body = DestinationView),
        (status = 404, description = "`not_found`: no source of this tenant routes to it", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn get(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
) -> Result<web::Json<DestinationView>, AdminError> {
    let name = in_tenant(&state, tenant.as_str(), &path)?;
    Ok(web::Json(view(&state, tenant.as_str(), &name).await?))
}

/// Pauses or resumes, answering with the destination as it is then.
async fn set_paused(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
    request: HttpRequest,
    body: web::Bytes,
    paused: bool,
) -> Result<HttpResponse, AdminError> {
    let (state, tenant, body) = (&*state.into_inner(), &tenant, &body);
    let path = &path;
    idempotent(state, tenant, &request, body, move |idem| async move {
        let name = in_tenant(state, tenant.as_str(), path)?;
        let now = Utc::now();
        let mut shown = view(state, tenant.as_str(), &name).await?;
        shown.paused_at = if paused {
            shown.paused_at.or(Some(now))
        } else {
            None
        };
        shown.state = state_name(shown.paused_at, shown.tripped_at).to_owned();
        let reply = Reply::json(200, &shown, idem.is_some());
        state.admin_pause.pass().await;
        let save = idem.as_ref().map(|i| i.save(reply.status, &reply.body));
        state
            .store
            .set_destination_paused(&name, paused, now, save.as_ref())
            .await?;
        Ok(reply)
    })
    .await
}

#[utoipa::path(post, path = "/admin/v1/destinations/{name}/pause", tag = "destinations", operation_id = "pause_destination",
    params(("name" = String, Path, description = "destination name"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retried POST act once")),
    responses((status = 200, description = "Paused: its jobs are held, in every process, until resumed", body = DestinationView),
        (status = 404, description = "`not_found`: no source of this tenant routes to it", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn pause(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
    request: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, AdminError> {
    set_paused(state, tenant, path, request, body, true).await
}

#[utoipa::path(post, path = "/admin/v1/destinations/{name}/resume", tag = "destinations", operation_id = "resume_destination",
    params(("name" = String, Path, description = "destination name"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retried POST act once")),
    responses((status = 200, description = "Active: its held jobs are delivered, oldest first", body = DestinationView),
        (status = 404, description = "`not_found`: no source of this tenant routes to it", body = super::views::ErrorBody)),
    security(("bearer" = [])))]
pub async fn resume(
    state: web::Data<AppState>,
    tenant: Tenant,
    path: web::Path<String>,
    request: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, AdminError> {
    set_paused(state, tenant, path, request, body, false).await
}
