//! The one place where errors become HTTP responses: `{"error": {"code", "message"}}`.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;

use crate::ingest::IngestError;
use crate::verify::VerifyError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("no source named {0:?} is configured")]
    UnknownSource(String),
    #[error("the body is larger than the {0} byte limit")]
    PayloadTooLarge(usize),
    #[error("the request body could not be read: {0}")]
    BadPayload(String),
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error("the event could not be stored; retry later")]
    StoreUnavailable { retry_after_seconds: u64 },
    #[error("this source is over its rate limit; retry later")]
    RateLimited { retry_after_seconds: u64 },
    #[error("the request body did not arrive in time")]
    BodyTimeout,
}

impl ApiError {
    pub fn from_ingest(e: IngestError, retry_after_seconds: u64) -> Self {
        // The provider's retry is the safety net: any failure to store is a 503, never a 4xx.
        tracing::warn!(error = %e, "store failed; answering 503");
        Self::StoreUnavailable {
            retry_after_seconds,
        }
    }

    /// `{"error": {"code", "message"}}`.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"code": self.code(), "message": self.to_string()}})
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownSource(_) => "unknown_source",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::BadPayload(_) => "bad_request",
            Self::Verify(v) => v.code(),
            Self::StoreUnavailable { .. } => "store_unavailable",
            Self::RateLimited { .. } => "rate_limited",
            Self::BodyTimeout => "request_timeout",
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::UnknownSource(_) => StatusCode::NOT_FOUND,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BadPayload(_) => StatusCode::BAD_REQUEST,
            Self::Verify(
                VerifyError::MissingEventId(_)
                | VerifyError::InvalidEventId(_)
                | VerifyError::MalformedBody
                | VerifyError::UnknownHandshake
                | VerifyError::InvalidHandshake(_),
            ) => StatusCode::BAD_REQUEST,
            Self::Verify(VerifyError::InvalidVerifyToken) => StatusCode::FORBIDDEN,
            Self::Verify(_) => StatusCode::UNAUTHORIZED,
            Self::StoreUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        if let Self::BodyTimeout | Self::PayloadTooLarge(_) | Self::BadPayload(_) = self {
            // The body was not read to its end: whatever the client sends next on this
            // connection is the rest of it, not a new request. Closing also frees the socket
            // of a client that stalls mid-body, chunked or not.
            response.force_close();
        }
        if let Self::StoreUnavailable {
            retry_after_seconds,
        }
        | Self::RateLimited {
            retry_after_seconds,
        } = self
        {
            response.insert_header((header::RETRY_AFTER, retry_after_seconds.to_string()));
        }
        response.json(self.body())
    }
}
