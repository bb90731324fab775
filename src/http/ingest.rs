//! `POST /webhooks/{source}`: read the raw body, verify, ingest, answer.

use actix_web::{web, HttpRequest, HttpResponse};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;
use serde_json::json;

use super::error::ApiError;
use super::AppState;
use std::time::Instant;

use crate::domain::{EventId, ProviderEventId};
use crate::ingest::{ingest, IngestOutcome};
use crate::verify::{RequestHeaders, Unverified, Verified};

/// What an answered request did, for the log line and the metrics.
struct Handled {
    response: HttpResponse,
    outcome: &'static str,
    event_id: Option<EventId>,
    provider_event_id: Option<ProviderEventId>,
}

/// `POST /webhooks/{source}` for a name that has no route of its own (see `configure_ingest`):
/// answered the same way, so an unknown source gets its 404 from `handle`.
pub async fn receive_webhook_at(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    receive_webhook(state, request, &path.into_inner(), payload).await
}

/// Webhook URLs take POST only.
pub async fn method_not_allowed() -> HttpResponse {
    not_allowed("POST", "webhook URLs take POST only")
}

/// The URL of a source whose provider has a GET handshake (Dropbox, Meta).
pub async fn method_not_allowed_get() -> HttpResponse {
    not_allowed(
        "GET, POST",
        "this webhook URL takes POST, and GET for its provider's handshake",
    )
}

fn not_allowed(allow: &'static str, message: &'static str) -> HttpResponse {
    HttpResponse::MethodNotAllowed()
        .insert_header((actix_web::http::header::ALLOW, allow))
        .json(json!({"error": {"code": "method_not_allowed", "message": message}}))
}

pub async fn receive_webhook(
    state: web::Data<AppState>,
    request: HttpRequest,
    source_name: &str,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let started = Instant::now();
    let result = handle(&state, &request, source_name, payload).await;
    if let Err(ApiError::BodyTimeout | ApiError::PayloadTooLarge(_) | ApiError::BadPayload(_)) =
        &result
    {
        if let (Some(connection), Err(e)) = (
            request.conn_data::<std::sync::Arc<super::Connection>>(),
            &result,
        ) {
            connection.answer_and_close(
                actix_web::ResponseError::status_code(e),
                &e.body().to_string(),
            );
        }
    }
    // Only configured names become labels: a path cannot grow the metrics without bound.
    let source = if state.config.sources.contains_key(source_name) {
        source_name
    } else {
        "_unknown"
    };
    let (outcome, reason) = match &result {
        Ok(h) => (h.outcome, ""),
        Err(e) => ("rejected", e.code()),
    };
    if outcome == "rejected" && source != "_unknown" {
        state.alerts.rejected(source);
    }
    let m = &state.metrics;
    m.ingest_requests
        .with_label_values(&[source, outcome, reason])
        .inc();
    m.ingest_duration
        .with_label_values(&[source])
        .observe(started.elapsed().as_secs_f64());
    let (event_id, provider_event_id) = match &result {
        Ok(h) => (
            h.event_id.map(|i| i.to_string()),
            h.provider_event_id.as_ref().map(|p| p.to_string()),
        ),
        Err(_) => (None, None),
    };
    tracing::info!(
        source,
        event_id = event_id.as_deref().unwrap_or(""),
        provider_event_id = provider_event_id.as_deref().unwrap_or(""),
        outcome,
        reason,
        "webhook {outcome}"
    );
    result.map(|h| h.response)
}

async fn handle(
    state: &AppState,
    request: &HttpRequest,
    source_name: &str,
    payload: web::Payload,
) -> Result<Handled, ApiError> {
    let source = state
        .config
        .sources
        .get(source_name)
        .ok_or_else(|| ApiError::UnknownSource(source_name.chars().take(64).collect()))?;
    if let Some(limiter) = state.rate_limits.get(source_name) {
        // Checked before the body is read or verified: a flood costs as little as possible.
        limiter
            .check(Instant::now())
            .map_err(|wait| ApiError::RateLimited {
                retry_after_seconds: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
            })?;
    }
    let limit = state.config.server.max_body_bytes;
    // The head is bounded by actix (`client_request_timeout`); the body needs its own
    // deadline, or a client dripping bytes would hold the connection forever.
    let body = tokio::time::timeout(
        state.config.server.request_timeout,
        read_body(request, payload, limit),
    )
    .await
    .map_err(|_| ApiError::BodyTimeout)??;
    let headers = request_headers(request);

    let now = chrono::Utc::now();
    let unverified = Unverified::new(headers, body)
        .with_target(request.method().as_str(), request.query_string());
    let verified = unverified
        .verify_batched_or_return(&source.verifier, now.timestamp(), &state.ed25519)
        .await
        .map_err(|rejected| {
            state.quarantine.keep(source, &rejected, now);
            rejected.error
        })?;
    let event = match verified {
        Verified::Challenge(answer) => {
            return Ok(Handled {
                // An unsigned handshake echoes what anyone sends: never let it be sniffed.
                response: HttpResponse::Ok()
                    .content_type(answer.content_type)
                    .insert_header((actix_web::http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
                    .body(answer.body),
                outcome: "challenge",
                event_id: None,
                provider_event_id: None,
            });
        }
        Verified::Event(event) => event,
    };
    let retry_after = state.config.server.retry_after_seconds;
    let provider_event_id = event.provider_event_id().clone();
    let outcome = ingest(&state.batcher, source, event, now)
        .await
        .map_err(|e| ApiError::from_ingest(e, retry_after))?;
    let (duplicate, outcome, id) = match outcome {
        IngestOutcome::Accepted(id) => (false, "accepted", id),
        IngestOutcome::Duplicate(id) => (true, "duplicate", id),
    };
    let mut response = match source.verifier.response() {
        // The answer the provider expects (Discord's deferred interaction, Twilio's TwiML);
        // the id travels in a header instead.
        Some(spec) => {
            let status = actix_web::http::StatusCode::from_u16(spec.status)
                .unwrap_or(actix_web::http::StatusCode::OK);
            HttpResponse::build(status)
                .content_type(spec.content_type.as_str())
                .insert_header(("Hookgate-Event-Id", id.to_string()))
                .body(spec.body.clone())
        }
        None => HttpResponse::Ok().json(json!({"id": id.to_string(), "duplicate": duplicate})),
    };
    if duplicate {
        response.headers_mut().insert(
            actix_web::http::header::HeaderName::from_static("idempotent-replayed"),
            actix_web::http::header::HeaderValue::from_static("true"),
        );
    }
    Ok(Handled {
        response,
        outcome,
        event_id: Some(id),
        provider_event_id: Some(provider_event_id),
    })
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

/// The request's headers sorted by name, each name's values in the order they arrived.
/// actix keeps headers in a hash map, which loses the order between different names, so the
/// stored order is the sorted one: the same for the same request, whatever the map did.
fn request_headers(request: &HttpRequest) -> RequestHeaders {
    // A value that is not UTF-8 is left out rather than converted lossily: conversion could
    // merge distinct ids into one (and so drop events as duplicates). An id or signature
    // header left out is then answered as missing.
    let mut headers: Vec<(&str, &str)> = request
        .headers()
        .iter()
        .filter_map(|(name, value)| {
            std::str::from_utf8(value.as_bytes())
                .ok()
                .map(|v| (name.as_str(), v))
        })
        .collect();
    // Stable: a repeated header's values keep their order.
    headers.sort_by_key(|(name, _)| *name);
    headers.into_iter().collect()
}
