//! `POST /webhooks/{source}`: read the raw body, verify, ingest, answer.

use actix_web::{web, HttpRequest, HttpResponse};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;
use serde_json::json;

use super::error::ApiError;
use super::AppState;
use crate::ingest::{ingest, IngestOutcome};
use crate::verify::{RequestHeaders, Unverified, Verified};

pub async fn receive_webhook(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let source_name = path.into_inner();
    let source = state
        .config
        .sources
        .get(&source_name)
        .ok_or_else(|| ApiError::UnknownSource(source_name.chars().take(64).collect()))?;
    if let Some(limiter) = state.rate_limits.get(&source_name) {
        // Checked before the body is read or verified: a flood costs as little as possible.
        limiter.check(std::time::Instant::now()).map_err(|wait| {
            tracing::info!(source = %source.name, outcome = "rejected", reason = "rate_limited", "webhook rejected");
            ApiError::RateLimited {
                retry_after_seconds: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
            }
        })?;
    }
    let limit = state.config.server.max_body_bytes;
    let body = read_body(&request, payload, limit).await?;
    let headers = request_headers(&request);

    let now = chrono::Utc::now();
    let verified = Unverified::new(headers, body)
        .verify(&source.verifier, now.timestamp())
        .inspect_err(|e| {
            tracing::info!(source = %source.name, outcome = "rejected", reason = e.code(), "webhook rejected");
        })?;
    let event = match verified {
        Verified::Challenge(challenge) => {
            return Ok(HttpResponse::Ok().json(json!({ "challenge": challenge })));
        }
        Verified::Event(event) => event,
    };
    let retry_after = state.config.server.retry_after_seconds;
    let provider_event_id = event.provider_event_id().clone();
    let outcome = ingest(&state.batcher, source, event, now)
        .await
        .map_err(|e| ApiError::from_ingest(e, retry_after))?;
    let response = match outcome {
        IngestOutcome::Accepted(id) => {
            tracing::info!(source = %source.name, event_id = %id, provider_event_id = %provider_event_id, outcome = "accepted", "webhook stored");
            HttpResponse::Ok().json(json!({"id": id.to_string(), "duplicate": false}))
        }
        IngestOutcome::Duplicate(id) => {
            tracing::info!(source = %source.name, event_id = %id, provider_event_id = %provider_event_id, outcome = "duplicate", "webhook already stored");
            HttpResponse::Ok()
                .insert_header(("Idempotent-Replayed", "true"))
                .json(json!({"id": id.to_string(), "duplicate": true}))
        }
    };
    Ok(response)
}

/// Reads at most `limit` bytes. A declared `Content-Length` over the limit is refused before
/// reading; a chunked body is cut off as soon as it passes the limit.
async fn read_body(
    request: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<Bytes, ApiError> {
    if let Some(len) = request
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > limit as u64 {
            return Err(ApiError::PayloadTooLarge(limit));
        }
    }
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::BadPayload(e.to_string()))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

fn request_headers(request: &HttpRequest) -> RequestHeaders {
    request
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}
