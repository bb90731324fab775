//! Console requests: check the session (and CSRF on forms), call the admin actions, render.

use std::collections::HashMap;
use std::time::Instant;

use actix_web::cookie::{time::Duration as CookieAge, Cookie, SameSite};
use actix_web::http::header::RETRY_AFTER;
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::Utc;

use super::pages;
use super::request::{error_page, form_session, redirect, session};
use super::session::{random_token, SessionId, LOGIN_CSRF_COOKIE, SESSION_COOKIE, SESSION_SECONDS};
use crate::admin::dead_letters::{
    dead_letter_page, job_in_tenant, not_a_dead_letter, retry_matching,
};
use crate::admin::events::{event_detail, event_in_tenant, replay_destinations, replay_jobs};
use crate::admin::views::EventSummaryView;
use crate::admin::{authenticate, cursor, AdminError, Tenant};
use crate::http::auth_failures::{retry_after_seconds, Client};
use crate::http::AppState;
use crate::store::EventStatus;
use crate::store::{DeadLetterFilter, EventFilter, PageCursor};

type Form = web::Form<HashMap<String, String>>;
type Query = web::Query<HashMap<String, String>>;

/// Only these messages are shown from a redirect's query: a link cannot inject text.
pub(super) fn notice(query: &Query) -> Option<&'static str> {
    match query.get("done").map(String::as_str) {
        Some("replayed") => Some("Replay queued."),
        Some("retried") => Some("Dead letter retried: it is pending again."),
        Some("discarded") => Some("Dead letter discarded."),
        Some("bulk-retried") => Some("Matching dead letters retried."),
        Some("bulk-discarded") => Some("Matching dead letters discarded."),
        Some("undelivered-retried") => {
            Some("Undelivered jobs retried; held jobs go out when their destination resumes.")
        }
        Some("paused") => Some("Destination paused: its jobs are held until it is resumed."),
        Some("resumed") => Some("Destination resumed: its held jobs are being delivered."),
        Some("quarantine-verified") => Some(
            "Quarantine verified again: what verifies now is stored and delivered; the rest stays.",
        ),
        Some("quarantine-discarded") => Some("Request discarded from the quarantine."),
        _ => None,
    }
}

fn secure(req: &HttpRequest) -> bool {
    req.connection_info().scheme() == "https"
}

pub(super) fn text(map: &HashMap<String, String>, k: &str) -> Option<String> {
    map.get(k)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

pub async fn home() -> HttpResponse {
    redirect("/console/events")
}

pub async fn login_form(req: HttpRequest) -> HttpResponse {
    let csrf = random_token();
    let cookie = Cookie::build(LOGIN_CSRF_COOKIE, csrf.clone())
        .path("/console")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure(&req))
        .finish();
    HttpResponse::Ok()
        .cookie(cookie)
        .content_type("text/html; charset=utf-8")
        .body(pages::login(&csrf, None).into_string())
}

pub async fn login(state: web::Data<AppState>, req: HttpRequest, form: Form) -> HttpResponse {
    let given = form.get("csrf").map(String::as_str).unwrap_or("");
    let expected = req
        .cookie(LOGIN_CSRF_COOKIE)
        .map(|c| c.value().to_owned())
        .unwrap_or_default();
    if expected.is_empty()
        || !bool::from(subtle::ConstantTimeEq::ct_eq(
            expected.as_bytes(),
            given.as_bytes(),
        ))
    {
        return HttpResponse::Forbidden()
            .body("CSRF token missing or wrong; reload the login page");
    }
    let token = form.get("token").map(|t| t.trim()).unwrap_or("");
    let (client, now) = (Client::of(req.peer_addr()), Instant::now());
    if let Err(wait) = state.auth_failures.check(client, now) {
        return HttpResponse::TooManyRequests()
            .insert_header((RETRY_AFTER, retry_after_seconds(wait).to_string()))
            .content_type("text/html; charset=utf-8")
            .body(
                pages::login(given, Some("Too many failed logins; try again later.")).into_string(),
            );
    }
    let Some(tenant) = authenticate(&state.config.admin.tokens, token).cloned() else {
        state.auth_failures.failed(client, now);
        tracing::warn!(client = %client, surface = "console", "authentication failed");
        return HttpResponse::Unauthorized()
            .content_type("text/html; charset=utf-8")
            .body(pages::login(given, Some("That token is not valid.")).into_string());
    };
    let id = SessionId::generate();
    let now = Utc::now().timestamp();
    if let Err(e) = state
        .store
        .create_session(&id.digest(), tenant.as_str(), now, now + SESSION_SECONDS)
        .await
    {
        return error_page(e.into());
    }
    let cookie = Cookie::build(SESSION_COOKIE, id.cookie_value())
        .path("/console")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure(&req))
        .max_age(CookieAge::seconds(SESSION_SECONDS))
        .finish();
    let mut response = redirect("/console/events");
    let _ = response.add_cookie(&cookie);
    response
}

pub async fn logout(state: web::Data<AppState>, req: HttpRequest, form: Form) -> HttpResponse {
    let s = match form_session(&state, &req, &form).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    if let Err(e) = state.store.delete_session(&s.id.digest()).await {
        return error_page(e.into());
    }
    let mut gone = Cookie::build(SESSION_COOKIE, "").path("/console").finish();
    gone.make_removal();
    let mut response = redirect("/console/login");
    let _ = response.add_cookie(&gone);
    response
}

pub(super) fn html(markup: maud::Markup) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(markup.into_string())
}

pub async fn events(state: web::Data<AppState>, req: HttpRequest, query: Query) -> HttpResponse {
    let s = match session(&state, &req).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let parse_time = |k: &str| {
        text(&query, k).map(|v| {
            chrono::DateTime::parse_from_rfc3339(&v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| AdminError::BadRequest(format!("{k} must be an RFC 3339 time")))
        })
    };
    let result: Result<_, AdminError> = async {
        let filter = EventFilter {
            tenant: s.tenant.to_string(),
            source: text(&query, "source"),
            event_type: text(&query, "event_type"),
            provider_event_id: text(&query, "provider_event_id"),
            status: text(&query, "status")
                .map(|v| {
                    EventStatus::parse(&v)
                        .ok_or_else(|| AdminError::BadRequest("unknown status".into()))
                })
                .transpose()?,
            received_from: parse_time("received_from").transpose()?,
            received_to: parse_time("received_to").transpose()?,
        };
        let after = text(&query, "cursor")
            .map(|c| cursor::decode(&c))
            .transpose()?;
        let limit = 50;
        let mut rows = state.store.list_events(&filter, after, limit + 1).await?;
        let more = rows.len() as i64 > limit;
        rows.truncate(limit as usize);
        let since = super::destinations::chart_start(Utc::now());
        let ingest = state
            .store
            .ingest_minutes(s.tenant.as_str(), since, super::chart::MINUTES)
            .await?;
        Ok((rows, more, ingest))
    }
    .await;
    let (rows, more, ingest) = match result {
        Ok(r) => r,
        Err(e) => return error_page(e),
    };
    let keys = [
        "source",
        "event_type",
        "status",
        "received_from",
        "received_to",
    ];
    let filters: Vec<(&str, String)> = keys
        .iter()
        .filter_map(|k| text(&query, k).map(|v| (*k, v)))
        .collect();
    let next = more.then(|| {
        let last = rows.last().expect("more than a page");
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in &filters {
            q.append_pair(k, v);
        }
        q.append_pair(
            "cursor",
            &cursor::encode(&PageCursor {
                at: last.received_at,
                id: last.id.as_uuid(),
            }),
        );
        format!("/console/events?{}", q.finish())
    });
    let views: Vec<EventSummaryView> = rows.iter().map(EventSummaryView::from).collect();
    html(pages::events(pages::EventsPage {
        tenant: s.tenant.as_str(),
        csrf: &s.csrf,
        notice: notice(&query),
        filters: &filters,
        rows: &views,
        next,
        ingest: &ingest,
    }))
}

pub async fn event(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    query: Query,
) -> HttpResponse {
    let s = match session(&state, &req).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    match event_detail(&state, &Tenant(s.tenant.clone()), &path).await {
        Ok(detail) => html(pages::event(
            s.tenant.as_str(),
            &s.csrf,
            notice(&query),
            &detail,
        )),
        Err(e) => error_page(e),
    }
}

pub async fn replay(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: Form,
) -> HttpResponse {
    let s = match form_session(&state, &req, &form).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let result: Result<(), AdminError> = async {
        let event = event_in_tenant(&state, &Tenant(s.tenant.clone()), &path).await?;
        let destinations = replay_destinations(&state, &event, None)?;
        let jobs = replay_jobs(&state, &event, destinations);
        state.store.create_jobs(&jobs, Utc::now(), None).await?;
        Ok(())
    }
    .await;
    match result {
        Ok(()) => redirect(&format!("/console/events/{}?done=replayed", path.as_str())),
        Err(e) => error_page(e),
    }
}

pub async fn dead_letters(
    state: web::Data<AppState>,
    req: HttpRequest,
    query: Query,
) -> HttpResponse {
    let s = match session(&state, &req).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let filter = DeadLetterFilter {
        tenant: s.tenant.to_string(),
        destination: text(&query, "destination"),
        source: text(&query, "source"),
        failed_before: None,
    };
    let after = match text(&query, "cursor")
        .map(|c| cursor::decode(&c))
        .transpose()
    {
        Ok(a) => a,
        Err(e) => return error_page(e),
    };
    match dead_letter_page(&state, &filter, after, 50).await {
        Ok((rows, next)) => {
            let next = next.map(|c| format!("/console/dead-letters?cursor={c}"));
            html(pages::dead_letters(
                s.tenant.as_str(),
                &s.csrf,
                notice(&query),
                &rows,
                next,
            ))
        }
        Err(e) => error_page(e),
    }
}

/// The tenant's sources: where each reads its event id, type and signature.
pub async fn sources(state: web::Data<AppState>, req: HttpRequest, query: Query) -> HttpResponse {
    let s = match session(&state, &req).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let views = crate::admin::sources::views(&state, s.tenant.as_str());
    html(pages::sources(
        s.tenant.as_str(),
        &s.csrf,
        notice(&query),
        &views,
    ))
}

pub async fn retry(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: Form,
) -> HttpResponse {
    dead_letter_action(&state, &req, &path, &form, DeadLetterAction::Retry).await
}

pub async fn discard(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: Form,
) -> HttpResponse {
    dead_letter_action(&state, &req, &path, &form, DeadLetterAction::Discard).await
}

#[derive(Clone, Copy)]
enum DeadLetterAction {
    Retry,
    Discard,
}

/// One dead letter of the session's tenant retried or discarded, then back to the list.
async fn dead_letter_action(
    state: &AppState,
    req: &HttpRequest,
    job: &str,
    form: &Form,
    action: DeadLetterAction,
) -> HttpResponse {
    let s = match form_session(state, req, form).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let tenant = Tenant(s.tenant.clone());
    let result: Result<(), AdminError> = async {
        let found = job_in_tenant(state, &tenant, job).await?;
        let (id, now) = (found.job.id, Utc::now());
        let changed = match action {
            DeadLetterAction::Retry => {
                state
                    .store
                    .retry_dead_letter(id, tenant.as_str(), now, None)
                    .await?
            }
            DeadLetterAction::Discard => {
                state
                    .store
                    .discard_dead_letter(id, tenant.as_str(), now)
                    .await?
            }
        };
        if !changed {
            return Err(not_a_dead_letter(&found));
        }
        Ok(())
    }
    .await;
    match (result, action) {
        (Ok(()), DeadLetterAction::Retry) => redirect("/console/dead-letters?done=retried"),
        (Ok(()), DeadLetterAction::Discard) => redirect("/console/dead-letters?done=discarded"),
        (Err(e), _) => error_page(e),
    }
}

pub async fn bulk_discard(
    state: web::Data<AppState>,
    req: HttpRequest,
    form: Form,
) -> HttpResponse {
    let s = match form_session(&state, &req, &form).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let now = Utc::now();
    let filter = DeadLetterFilter {
        tenant: s.tenant.to_string(),
        destination: text(&form, "destination"),
        source: text(&form, "source"),
        failed_before: Some(now),
    };
    if filter.destination.is_none() && filter.source.is_none() {
        return error_page(AdminError::BadRequest(
            "give a destination or a source".into(),
        ));
    }
    loop {
        match state
            .store
            .discard_dead_letters_batch(&filter, now, 500)
            .await
        {
            Ok(n) if n < 500 => return redirect("/console/dead-letters?done=bulk-discarded"),
            Ok(_) => continue,
            Err(e) => return error_page(e.into()),
        }
    }
}

pub async fn bulk_retry(state: web::Data<AppState>, req: HttpRequest, form: Form) -> HttpResponse {
    let s = match form_session(&state, &req, &form).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let filter = DeadLetterFilter {
        tenant: s.tenant.to_string(),
        destination: text(&form, "destination"),
        source: text(&form, "source"),
        failed_before: Some(Utc::now()),
    };
    if filter.destination.is_none() && filter.source.is_none() {
        return error_page(AdminError::BadRequest(
            "give a destination or a source".into(),
        ));
    }
    match retry_matching(&state, &filter, Default::default(), None).await {
        Ok(_) => redirect("/console/dead-letters?done=bulk-retried"),
        Err(e) => error_page(e),
    }
}
