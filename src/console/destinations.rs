//! The console's destinations page: each destination the tenant's sources route to, its
//! state and queue, with pause and resume buttons (the admin API's actions, behind the
//! session and its CSRF token).

use std::collections::HashMap;

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::Utc;
use maud::{html, Markup};

use super::handlers::{html, notice};
use super::pages::page;
use super::request::{error_page, form_session, redirect, session};
use crate::admin::destinations::{names, view, DestinationView};
use crate::admin::AdminError;
use crate::http::AppState;

type Form = web::Form<HashMap<String, String>>;
type Query = web::Query<HashMap<String, String>>;

pub async fn list(state: web::Data<AppState>, req: HttpRequest, query: Query) -> HttpResponse {
    let s = match session(&state, &req).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let mut rows = Vec::new();
    for name in names(&state, s.tenant.as_str()) {
        match view(&state, s.tenant.as_str(), &name).await {
            Ok(v) => rows.push(v),
            Err(e) => return error_page(e),
        }
    }
    html(render(s.tenant.as_str(), &s.csrf, notice(&query), &rows))
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
    if !names(state, s.tenant.as_str()).iter().any(|n| n == name) {
        return error_page(AdminError::NotFound("destination"));
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

fn render(tenant: &str, csrf: &str, notice: Option<&str>, rows: &[DestinationView]) -> Markup {
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
                @for d in rows {
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
                }
            }
            @if rows.is_empty() { p id="empty" { "No destinations." } }
        },
    )
}
