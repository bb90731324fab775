use std::time::Duration;

use actix_web::{web, HttpResponse};
use serde_json::json;

use super::AppState;

/// Liveness: the process is up and serving.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Readiness: the store answers now, so an ingested event can be committed.
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    match tokio::time::timeout(Duration::from_secs(5), state.store.ping()).await {
        Ok(Ok(())) => HttpResponse::Ok().json(json!({"status": "ready"})),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness check failed");
            not_ready()
        }
        Err(_) => not_ready(),
    }
}

fn not_ready() -> HttpResponse {
    HttpResponse::ServiceUnavailable().json(json!({
        "error": {"code": "store_unavailable", "message": "the store does not answer"}
    }))
}

/// Prometheus text format.
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
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
