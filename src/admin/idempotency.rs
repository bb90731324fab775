//! Idempotency-Key for admin POSTs: the first request runs and saves its response in the
//! same transaction as its state change; a retry with the same key and request gets that
//! response back byte for byte. Rules: README "Idempotency-Key".

use std::future::Future;
use std::sync::Arc;

use actix_web::{HttpRequest, HttpResponse};
use chrono::Utc;
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use super::auth::Tenant;
use super::error::AdminError;
use crate::http::AppState;
use crate::store::{BulkProgress, IdempotencyBegin, ProgressKey, SavedResponse};

/// The key a request runs under, handed to the action so it can save its response (or its
/// bulk progress) in its own transaction.
#[derive(Debug, Clone)]
pub struct Idem {
    tenant: String,
    key: String,
    /// Where an abandoned bulk run with this key got to.
    pub progress: Option<BulkProgress>,
}

impl Idem {
    pub fn save<'a>(&'a self, status: u16, body: &'a [u8]) -> SavedResponse<'a> {
        SavedResponse {
            tenant: &self.tenant,
            key: &self.key,
            status,
            body,
        }
    }

    pub fn progress_key(&self) -> ProgressKey<'_> {
        ProgressKey {
            tenant: &self.tenant,
            key: &self.key,
        }
    }
}

/// A successful action's answer.
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    /// True when the action saved it with its state change; otherwise it is saved after.
    pub saved: bool,
}

impl Reply {
    pub fn json<T: serde::Serialize>(status: u16, value: &T, saved: bool) -> Self {
        Self {
            status,
            body: serde_json::to_vec(value).expect("a response serialises"),
            saved,
        }
    }
}

fn respond(status: u16, body: Vec<u8>) -> HttpResponse {
    HttpResponse::build(
        actix_web::http::StatusCode::from_u16(status).unwrap_or(actix_web::http::StatusCode::OK),
    )
    .content_type("application/json")
    .body(body)
}

/// A point where an admin action can be held, so tests can have a request "still running".
#[derive(Debug, Default)]
pub struct PausePoint {
    armed: std::sync::atomic::AtomicBool,
    pub reached: Notify,
    pub release: Notify,
}

impl PausePoint {
    /// The next action to pass the point waits there until `release.notify_one()`.
    pub fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) async fn pass(&self) {
        if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.reached.notify_one();
            self.release.notified().await;
        }
    }
}

pub type SharedPause = Arc<PausePoint>;

/// The Idempotency-Key format, as the OpenAPI document states it: 1 to 255 visible ASCII
/// characters (RFC 5234 VCHAR, `!` to `~`; no spaces).
pub const KEY_PATTERN: &str = "^[!-~]{1,255}$";

/// Whether `key` is a well-formed Idempotency-Key (see [`KEY_PATTERN`]).
pub fn valid_key(key: &str) -> bool {
    (1..=255).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

/// Runs `action` under the request's Idempotency-Key, if it has one.
pub async fn idempotent<F, Fut>(
    state: &AppState,
    tenant: &Tenant,
    request: &HttpRequest,
    body: &[u8],
    action: F,
) -> Result<HttpResponse, AdminError>
where
    F: FnOnce(Option<Idem>) -> Fut,
    Fut: Future<Output = Result<Reply, AdminError>>,
{
    let Some(header) = request.headers().get("idempotency-key") else {
        let reply = action(None).await?;
        return Ok(respond(reply.status, reply.body));
    };
    let key = header
        .to_str()
        .ok()
        .filter(|k| valid_key(k))
        .ok_or_else(|| {
            AdminError::BadRequest("Idempotency-Key must be 1 to 255 visible characters".into())
        })?
        .to_owned();
    let mut hasher = Sha256::new();
    for part in [
        request.method().as_str().as_bytes(),
        b"\n",
        request.uri().to_string().as_bytes(),
        b"\n",
        body,
    ] {
        hasher.update(part);
    }
    let hash = hex::encode(hasher.finalize());

    let now = Utc::now();
    let stale = chrono::Duration::from_std(state.config.admin.idempotency_stale_after)
        .unwrap_or(chrono::Duration::minutes(5));
    let begin = state
        .store
        .idempotency_begin(tenant.as_str(), &key, &hash, now, now - stale)
        .await?;
    let progress = match begin {
        IdempotencyBegin::Completed { status, body } => {
            let mut response = respond(status, body);
            response.headers_mut().insert(
                actix_web::http::header::HeaderName::from_static("idempotent-replayed"),
                actix_web::http::header::HeaderValue::from_static("true"),
            );
            return Ok(response);
        }
        IdempotencyBegin::Mismatch => return Err(AdminError::IdempotencyKeyReused),
        IdempotencyBegin::InProgress { done } => {
            return Err(AdminError::IdempotencyInProgress { done })
        }
        IdempotencyBegin::Proceed { progress } => progress,
    };
    let idem = Idem {
        tenant: tenant.as_str().to_owned(),
        key,
        progress,
    };
    match action(Some(idem.clone())).await {
        Ok(reply) => {
            if !reply.saved {
                state
                    .store
                    .idempotency_save(&idem.save(reply.status, &reply.body), Utc::now())
                    .await?;
            }
            Ok(respond(reply.status, reply.body))
        }
        Err(e) if actix_web::ResponseError::status_code(&e).is_server_error() => {
            // Not saved: the client may retry once the cause is gone.
            if let Err(release) = state
                .store
                .idempotency_release(&idem.tenant, &idem.key)
                .await
            {
                tracing::warn!(error = %release, "could not release an idempotency key");
            }
            Err(e)
        }
        Err(e) => {
            let status = actix_web::ResponseError::status_code(&e).as_u16();
            state
                .store
                .idempotency_save(&idem.save(status, &e.body_bytes()), Utc::now())
                .await?;
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_1_to_255_visible_ascii_characters() {
        assert!(valid_key("a"));
        assert!(valid_key("01J5-retry_7:~!"));
        assert!(valid_key(&"k".repeat(255)));
        assert!(!valid_key(""));
        assert!(!valid_key(&"k".repeat(256)));
        for bad in ["two words", "tab\there", "caf\u{e9}", "nul\0"] {
            assert!(!valid_key(bad), "{bad:?}");
        }
    }
}
