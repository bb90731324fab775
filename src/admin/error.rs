//! Admin API errors, mapped to HTTP in one place.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("a valid `Authorization: Bearer <token>` header is required")]
    Unauthorized,
    #[error("too many failed authentications from this address; retry later")]
    TooManyAuthFailures { retry_after_seconds: u64 },
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unprocessable(String),
    #[error("this Idempotency-Key was used for a different request")]
    IdempotencyKeyReused,
    /// `done`: a bulk request's progress so far.
    #[error("a request with this Idempotency-Key is still running{}; retry later", .done.map(|n| format!(" ({n} done so far)")).unwrap_or_default())]
    IdempotencyInProgress { done: Option<i64> },
    #[error("{0}")]
    Conflict(String),
    #[error("the store is unavailable; retry later")]
    Store(std::sync::Arc<StoreError>),
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unstorable(message) => Self::BadRequest(message),
            e => Self::Store(std::sync::Arc::new(e)),
        }
    }
}

impl From<crate::ingest::IngestError> for AdminError {
    fn from(e: crate::ingest::IngestError) -> Self {
        match e {
            crate::ingest::IngestError::Store(e) => Self::Store(e),
        }
    }
}

impl AdminError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::TooManyAuthFailures { .. } => "too_many_auth_failures",
            Self::NotFound(_) => "not_found",
            Self::BadRequest(_) => "bad_request",
            Self::Unprocessable(_) => "unprocessable",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::IdempotencyInProgress { .. } => "idempotency_in_progress",
            Self::Conflict(_) => "conflict",
            Self::Store(_) => "store_unavailable",
        }
    }

    /// The exact body bytes of this error's response (saved for Idempotency-Key replays).
    pub fn body_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({"error": {"code": self.code(), "message": self.to_string()}}))
            .expect("a JSON value serialises")
    }
}

impl ResponseError for AdminError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::TooManyAuthFailures { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unprocessable(_) | Self::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::IdempotencyInProgress { .. } | Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        if let Self::Store(e) = self {
            tracing::warn!(error = %e, "admin request failed in the store");
        }
        let mut response = HttpResponse::build(self.status_code());
        match self {
            Self::Unauthorized => {
                response.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
            }
            Self::Store(_) => {
                response.insert_header((header::RETRY_AFTER, "5"));
            }
            Self::TooManyAuthFailures {
                retry_after_seconds,
            } => {
                response.insert_header((header::RETRY_AFTER, retry_after_seconds.to_string()));
            }
            _ => {}
        }
        response
            .content_type("application/json")
            .body(self.body_bytes())
    }
}
