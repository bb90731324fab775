//! The console's undelivered page: every job not delivered (dead letter, held, retrying) with
//! its reason, filtered by destination and source, and a button that retries them all (held
//! jobs stay held until their destination resumes).

use std::collections::HashMap;

use actix_web::{web, HttpRequest, HttpResponse};
use maud::{html, Markup};

use super::handlers::{html, notice, text};
use super::pages::page;
use super::request::{error_page, form_session, redirect, session};
use crate::admin::cursor;
use crate::admin::undelivered::{retry_matching, UndeliveredQuery, UndeliveredView};
use crate::http::AppState;

type Form = web::Form<HashMap<String, String>>;
type Query = web::Query<HashMap<String, String>>;

fn filters(map: &HashMap<String, String>) -> UndeliveredQuery {
    UndeliveredQuery {
        destination: text(map, "destination"),
        source: text(map, "source"),
        ..UndeliveredQuery::default()
    }
}

pub async fn list(state: web::Data<AppState>, req: HttpRequest, query: Query) -> HttpResponse {
    let s = match session(&state, &req).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let q = filters(&query);
    let after = match text(&query, "cursor")
        .map(|c| cursor::decode(&c))
        .transpose()
    {
        Ok(a) => a,
        Err(e) => return error_page(e),
    };
    let filter = q.filter(s.tenant.as_str());
    match crate::admin::undelivered::page(&state, &filter, after, 50).await {
        Ok((rows, next)) => {
            let next = next.map(|c| format!("/console/undelivered?cursor={c}"));
            html(render(
                s.tenant.as_str(),
                &s.csrf,
                notice(&query),
                &q,
                &rows,
                next,
            ))
        }
        Err(e) => error_page(e),
    }
}

pub async fn retry(state: web::Data<AppState>, req: HttpRequest, form: Form) -> HttpResponse {
    let s = match form_session(&state, &req, &form).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let filter = filters(&form).filter(s.tenant.as_str());
    match retry_matching(&state, &filter, Default::default(), None).await {
        Ok(_) => redirect("/console/undelivered?done=undelivered-retried"),
        Err(e) => error_page(e),
    }
}

fn render(
    tenant: &str,
    csrf: &str,
    notice: Option<&str>,
    q: &UndeliveredQuery,
    rows: &[UndeliveredView],
    next: Option<String>,
) -> Markup {
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    page(
        "Undelivered",
        Some(tenant),
        csrf,
        notice,
        html! {
            h1 { "Undelivered" }
            form method="get" action="/console/undelivered" {
                fieldset {
                    input name="destination" placeholder="destination" value=(value(&q.destination));
                    input name="source" placeholder="source" value=(value(&q.source));
                    button type="submit" { "Filter" }
                }
            }
            form method="post" action="/console/undelivered/retry" {
                input type="hidden" name="csrf" value=(csrf);
                input type="hidden" name="destination" value=(value(&q.destination));
                input type="hidden" name="source" value=(value(&q.source));
                button type="submit" id="retry-undelivered" { "Retry all matching (held jobs stay held)" }
            }
            table id="undelivered" {
                tr {
                    th { "Reason" } th { "Destination" } th { "Source" } th { "Event" }
                    th { "Attempts" } th { "Last error" } th { "Next attempt" }
                }
                @for u in rows {
                    tr {
                        td class={ "reason-" (u.reason) } { (u.reason) }
                        td { (u.job.destination) }
                        td { (u.event.source) }
                        td { a href={ "/console/events/" (u.event.id) } { (u.event.provider_event_id) } }
                        td { (u.job.attempts) }
                        td { (u.job.last_error.as_deref().unwrap_or("")) }
                        td { (u.job.next_attempt_at.format("%Y-%m-%d %H:%M:%S")) }
                    }
                }
            }
            @if rows.is_empty() { p id="empty" { "Nothing is undelivered." } }
            @if let Some(next) = &next { p { a href=(next) id="next" { "Next page →" } } }
        },
    )
}
