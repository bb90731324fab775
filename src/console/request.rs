//! The session behind a console request: the cookie's id looked up in the store, its limits
//! applied, and the CSRF token of a form checked.

use std::collections::HashMap;

use actix_web::http::header::LOCATION;
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::Utc;

use super::session::{judge, SessionId, Verdict, SESSION_COOKIE};
use crate::admin::AdminError;
use crate::domain::Name;
use crate::http::AppState;

type Form = web::Form<HashMap<String, String>>;

/// A logged-in request: its tenant and the CSRF token its forms carry.
pub(super) struct Session {
    pub tenant: Name,
    pub id: SessionId,
    pub csrf: String,
}

pub(super) fn redirect(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((LOCATION, to))
        .finish()
}

/// Why a request is refused.
pub(super) enum Denied {
    NoSession,
    BadCsrf,
    Store(AdminError),
}

impl Denied {
    pub fn response(self) -> HttpResponse {
        match self {
            Self::NoSession => redirect("/console/login"),
            Self::BadCsrf => {
                HttpResponse::Forbidden().body("CSRF token missing or wrong; reload the page")
            }
            Self::Store(e) => error_page(e),
        }
    }
}

/// The session the request's cookie names, if it is stored and within its limits.
pub(super) async fn session(state: &AppState, req: &HttpRequest) -> Result<Session, Denied> {
    let cookie = req.cookie(SESSION_COOKIE).ok_or(Denied::NoSession)?;
    let id = SessionId::parse(cookie.value()).ok_or(Denied::NoSession)?;
    let digest = id.digest();
    let store_error = |e: crate::store::StoreError| Denied::Store(e.into());
    let stored = state
        .store
        .find_session(&digest)
        .await
        .map_err(store_error)?
        .ok_or(Denied::NoSession)?;
    let now = Utc::now().timestamp();
    match judge(&stored, now) {
        Verdict::Ended => {
            state
                .store
                .delete_session(&digest)
                .await
                .map_err(store_error)?;
            Err(Denied::NoSession)
        }
        Verdict::Valid { touch } => {
            if touch {
                state
                    .store
                    .touch_session(&digest, now)
                    .await
                    .map_err(store_error)?;
            }
            let tenant = Name::parse("tenant", &stored.tenant).map_err(|_| Denied::NoSession)?;
            Ok(Session {
                tenant,
                csrf: id.csrf(),
                id,
            })
        }
    }
}

/// The session of a form POST, with its CSRF token checked.
pub(super) async fn form_session(
    state: &AppState,
    req: &HttpRequest,
    form: &Form,
) -> Result<Session, Denied> {
    let s = session(state, req).await?;
    let given = form.get("csrf").map(String::as_str).unwrap_or("");
    if !s.id.csrf_ok(given) {
        return Err(Denied::BadCsrf);
    }
    Ok(s)
}

/// An admin error as a plain-text page.
pub(super) fn error_page(e: AdminError) -> HttpResponse {
    let status = actix_web::ResponseError::status_code(&e);
    HttpResponse::build(status)
        .content_type("text/plain; charset=utf-8")
        .body(format!("{}: {e}", e.code()))
}
