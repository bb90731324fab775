//! The console's destinations page: each destination the tenant's sources route to, its
//! state and queue, with pause and resume buttons (the admin API's actions, behind the
//! session and its CSRF token), and charts of the last hour: deliveries per minute, their
//! success rate, and the age of the oldest due job (sampled by the reconciler each minute, of
//! all tenants' jobs for the destination).

use std::collections::HashMap;

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::Utc;
use maud::{html, Markup};

use super::chart;
use super::handlers::{html, notice};
use super::pages::page;
use super::request::{error_page, form_session, redirect, session};
use crate::admin::destinations::{in_tenant, names, view, DestinationView};
use crate::admin::AdminError;
use crate::http::AppState;

type Form = web::Form<HashMap<String, String>>;
type Query = web::Query<HashMap<String, String>>;

pub async fn list(state: web::Data<AppState>, req: HttpRequest, query: Query) -> HttpResponse {
    let s = match session(&state, &req).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let since = chart_start(Utc::now());
    let mut rows = Vec::new();
    for name in names(&state, s.tenant.as_str()) {
        let row = async {
            let view = view(&state, s.tenant.as_str(), &name).await?;
            let deliveries = state
                .store
                .delivery_minutes(&name, s.tenant.as_str(), since, chart::MINUTES)
                .await?;
            let lag = state
                .store
                .destination_lag(&name, since, chart::MINUTES)
                .await?;
            Ok::<_, AdminError>(Row {
                view,
                deliveries,
                lag,
            })
        };
        match row.await {
            Ok(r) => rows.push(r),
            Err(e) => return error_page(e),
        }
    }
    html(render(s.tenant.as_str(), &s.csrf, notice(&query), &rows))
}

/// The start of the charts' hour: the minute 59 minutes before the current one, so the last
/// bar is the current minute.
pub(super) fn chart_start(now: chrono::DateTime<Utc>) -> chrono::DateTime<Utc> {
    let minute = now.timestamp().div_euclid(60) - (chart::MINUTES as i64 - 1);
    chrono::DateTime::from_timestamp(minute * 60, 0).unwrap_or(now)
}

/// A destination's line on the page, with its charts' data.
struct Row {
    view: DestinationView,
    /// (attempts, successes) per minute.
    deliveries: Vec<(i64, i64)>,
    /// The oldest due job's age, per minute sampled.
    lag: Vec<Option<i64>>,
}

fn charts(r: &Row) -> Markup {
    let name = &r.view.name;
    let attempts: Vec<Option<f64>> = r.deliveries.iter().map(|(a, _)| Some(*a as f64)).collect();
    let success: Vec<Option<f64>> = r
        .deliveries
        .iter()
        .map(|(a, s)| (*a > 0).then(|| *s as f64 / *a as f64))
        .collect();
    let lag: Vec<Option<f64>> = r.lag.iter().map(|v| v.map(|s| s as f64)).collect();
    html! {
        div.charts {
            (chart::bars(&format!("deliveries-{name}"), "Deliveries per minute", &attempts, None, |v| format!("{v:.0}")))
            (chart::bars(&format!("success-{name}"), "Success rate", &success, Some(1.0), |v| format!("{:.0} %", v * 100.0)))
            (chart::bars(&format!("lag-{name}"), "Oldest due job", &lag, None, |v| format!("{v:.0} s")))
        }
    }
}

pub async fn pause(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: Form,
) -> HttpResponse {
    set_paused(&state, &req, &path, &form, true).await
}

pub async fn resume(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: Form,
) -> HttpResponse {
    set_paused(&state, &req, &path, &form, false).await
}

async fn set_paused(
    state: &AppState,
    req: &HttpRequest,
    name: &str,
    form: &Form,
    paused: bool,
) -> HttpResponse {
    let s = match form_session(state, req, form).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    if let Err(e) = in_tenant(state, s.tenant.as_str(), name) {
        return error_page(e);
    }
    match state
        .store
        .set_destination_paused(name, paused, Utc::now(), None)
        .await
    {
        Ok(()) if paused => redirect("/console/destinations?done=paused"),
        Ok(()) => redirect("/console/destinations?done=resumed"),
        Err(e) => error_page(e.into()),
    }
}

fn render(tenant: &str, csrf: &str, notice: Option<&str>, rows: &[Row]) -> Markup {
    page(
        "Destinations",
        Some(tenant),
        csrf,
        notice,
        html! {
            h1 { "Destinations" }
            table id="destinations" {
                tr {
                    th { "Destination" } th { "State" } th { "Jobs due" } th { "Oldest due" }
                    th { "Attempts (1 h)" } th { "Success (1 h)" } th { "Failure streak" } th { "" }
                }
                @for r in rows {
                    @let d = &r.view;
                    tr id={ "destination-" (d.name) } {
                        td { (d.name) }
                        td class={ "state-" (d.state) } { (d.state) }
                        td { (d.jobs_due) }
                        td { @if let Some(age) = d.oldest_due_age_seconds { (age) " s" } @else { "-" } }
                        td { (d.recent_attempts) }
                        td { @if let Some(rate) = d.recent_success_rate { (format!("{:.1} %", rate * 100.0)) } @else { "-" } }
                        td { (d.failure_streak) }
                        td {
                            @let action = if d.state == "paused" { "resume" } else { "pause" };
                            form.inline method="post" action={ "/console/destinations/" (d.name) "/" (action) } {
                                input type="hidden" name="csrf" value=(csrf);
                                button type="submit" { @if action == "pause" { "Pause" } @else { "Resume" } }
                            }
                        }
                    }
                    tr.chart-row { td colspan="8" { (charts(r)) } }
                }
            }
            @if rows.is_empty() { p id="empty" { "No destinations." } }
        },
    )
}
