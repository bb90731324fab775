use std::time::Duration;

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::AppState;

/// Liveness: the process is up and serving.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Readiness: the store answers now, so an ingested event can be committed. Broker
/// destinations are reported but do not make the process unready: ingest commits while a
/// broker is down, and their jobs wait in the queue, so taking every instance out of a load
/// balancer for it would turn a delivery delay into lost webhooks. A broker that cannot be
/// reached makes the status `"degraded"` and names the destination and the reason.
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let store = tokio::time::timeout(Duration::from_secs(5), state.store.ping());
    let brokers = state.brokers.check(Duration::from_secs(3));
    let (store, brokers) = futures_util::future::join(store, brokers).await;
    match store {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness check failed");
            return not_ready();
        }
        Err(_) => return not_ready(),
    }
    if brokers.is_empty() {
        return HttpResponse::Ok().json(json!({"status": "ready"}));
    }
    for b in brokers.iter().filter(|b| !b.ready) {
        tracing::warn!(destination = %b.destination, error = b.error.as_deref(), "broker destination not reachable");
    }
    let status = if brokers.iter().all(|b| b.ready) {
        "ready"
    } else {
        "degraded"
    };
    HttpResponse::Ok().json(json!({"status": status, "destinations": brokers}))
}

fn not_ready() -> HttpResponse {
    HttpResponse::ServiceUnavailable().json(json!({
        "error": {"code": "store_unavailable", "message": "the store does not answer"}
    }))
}

/// Prometheus text format; with `[metrics] token`, only for `Authorization: Bearer <token>`.
pub async fn metrics(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    if let Some(want) = &state.config.metrics.token_sha256 {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| -> [u8; 32] { Sha256::digest(t.trim().as_bytes()).into() });
        if !given.is_some_and(|g| bool::from(g.ct_eq(want))) {
            return HttpResponse::Unauthorized()
                .insert_header((header::WWW_AUTHENTICATE, "Bearer"))
                .json(json!({"error": {
                    "code": "unauthorized",
                    "message": "a valid `Authorization: Bearer <token>` header is required",
                }}));
        }
    }
    match state.metrics.render(&state.store).await {
        Ok(text) => HttpResponse::Ok()
            .content_type("text/plain; version=0.0.4")
            .body(text),
        Err(e) => {
            tracing::warn!(error = %e, "metrics could not read the store");
            not_ready()
        }
    }
}
