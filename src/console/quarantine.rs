//! The console's quarantine page: requests that failed verification, filtered by source and
//! reason, each verifiable again or discardable, and a button that verifies every matching
//! one with the sources' current secrets.

use std::collections::HashMap;

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::Utc;
use maud::{html, Markup};

use super::handlers::{html, notice, text};
use super::pages::page;
use super::request::{error_page, form_session, redirect, session};
use crate::admin::cursor;
use crate::admin::quarantine::{verify_matching, QuarantineView};
use crate::http::AppState;
use crate::store::{PageCursor, QuarantineFilter, Walk};

type Form = web::Form<HashMap<String, String>>;
type Query = web::Query<HashMap<String, String>>;

fn filter(tenant: &str, map: &HashMap<String, String>) -> QuarantineFilter {
    QuarantineFilter {
        tenant: tenant.to_owned(),
        source: text(map, "source"),
        reason: text(map, "reason"),
        since: None,
        until: None,
    }
}

pub async fn list(state: web::Data<AppState>, req: HttpRequest, query: Query) -> HttpResponse {
    let s = match session(&state, &req).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let after = match text(&query, "cursor")
        .map(|c| cursor::decode(&c))
        .transpose()
    {
        Ok(a) => a,
        Err(e) => return error_page(e),
    };
    let f = filter(s.tenant.as_str(), &query);
    let mut rows = match state
        .store
        .list_quarantine(&f, after, 51, Walk::NewestFirst)
        .await
    {
        Ok(rows) => rows,
        Err(e) => return error_page(e.into()),
    };
    let next = cursor::next_page(&mut rows, 50, |q| PageCursor {
        at: q.received_at,
        id: q.id,
    })
    .map(|c| format!("/console/quarantine?cursor={c}"));
    let rows: Vec<QuarantineView> = rows.iter().map(QuarantineView::from).collect();
    html(render(
        s.tenant.as_str(),
        &s.csrf,
        notice(&query),
        &f,
        &rows,
        next,
    ))
}

/// Verifies every request matching the form's filters (none: the whole quarantine).
pub async fn verify_all(state: web::Data<AppState>, req: HttpRequest, form: Form) -> HttpResponse {
    let s = match form_session(&state, &req, &form).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let f = QuarantineFilter {
        until: Some(Utc::now()),
        ..filter(s.tenant.as_str(), &form)
    };
    match verify_matching(&state, &f).await {
        Ok(done) => redirect(&format!(
            "/console/quarantine?done=quarantine-verified&ingested={}&rejected={}",
            done.ingested + done.duplicate,
            done.rejected
        )),
        Err(e) => error_page(e),
    }
}

/// Drops one request from the quarantine.
pub async fn discard(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: Form,
) -> HttpResponse {
    let s = match form_session(&state, &req, &form).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let Ok(id) = uuid::Uuid::parse_str(&path) else {
        return error_page(crate::admin::AdminError::NotFound("quarantined request"));
    };
    match state
        .store
        .remove_quarantined(id, s.tenant.as_str(), Utc::now(), None)
        .await
    {
        Ok(_) => redirect("/console/quarantine?done=quarantine-discarded"),
        Err(e) => error_page(e.into()),
    }
}

fn render(
    tenant: &str,
    csrf: &str,
    notice: Option<&str>,
    f: &QuarantineFilter,
    rows: &[QuarantineView],
    next: Option<String>,
) -> Markup {
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    page(
        "Quarantine",
        Some(tenant),
        csrf,
        notice,
        html! {
            h1 { "Quarantine" }
            p { "Requests to your sources that failed verification. Once a source's secrets are right (a secret rotated at the provider first), verify them again: each is checked against the time it arrived, and what verifies is stored and delivered as if it had arrived then." }
            form method="get" action="/console/quarantine" {
                fieldset {
                    input name="source" placeholder="source" value=(value(&f.source));
                    input name="reason" placeholder="reason" value=(value(&f.reason));
                    button type="submit" { "Filter" }
                }
            }
            form method="post" action="/console/quarantine/verify" {
                input type="hidden" name="csrf" value=(csrf);
                input type="hidden" name="source" value=(value(&f.source));
                input type="hidden" name="reason" value=(value(&f.reason));
                button type="submit" id="verify-quarantine" { "Verify all matching again" }
            }
            table id="quarantine" {
                tr {
                    th { "Received" } th { "Source" } th { "Reason" } th { "Message" }
                    th { "Checks" } th { "Bytes" } th { "" }
                }
                @for q in rows {
                    tr {
                        td { (q.received_at.format("%Y-%m-%d %H:%M:%S")) }
                        td { (q.source) }
                        td class={ "reason-" (q.reason) } { (q.reason) }
                        td { (q.message) }
                        td { (q.checks) }
                        td { (q.body_bytes) }
                        td {
                            form method="post" action={ "/console/quarantine/" (q.id) "/discard" } {
                                input type="hidden" name="csrf" value=(csrf);
                                button type="submit" { "Discard" }
                            }
                        }
                    }
                }
            }
            @if rows.is_empty() { p id="empty" { "The quarantine is empty." } }
            @if let Some(next) = &next { p { a href=(next) id="next" { "Next page →" } } }
        },
    )
}
