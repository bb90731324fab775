//! What every request passes before routing: the cap on header bytes, and which listener
//! serves `/metrics` when it has an address of its own.

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{web, HttpResponse};
use serde_json::json;

use super::{AppState, Connection};
use std::sync::Arc;

pub const METRICS_PATH: &str = "/metrics";

/// Bytes the request's header lines take on the wire: `name: value` and CRLF.
fn header_bytes(req: &ServiceRequest) -> usize {
    req.headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum()
}

fn error(status: actix_web::http::StatusCode, code: &str, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(json!({"error": {"code": code, "message": message}}))
}

pub async fn edge(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let refusal = match req.app_data::<web::Data<AppState>>() {
        Some(state) => refusal(state, &req),
        None => None,
    };
    if let Some(response) = refusal {
        return Ok(req.into_response(response).map_into_right_body());
    }
    // A request that ends its connection has no next head to wait for: no watch then (most
    // providers send one webhook per connection).
    let kept_alive = req.head().connection_type() == actix_web::http::ConnectionType::KeepAlive;
    let connection = req
        .conn_data::<Arc<Connection>>()
        .filter(|_| kept_alive)
        .cloned();
    if let Some(c) = &connection {
        c.started();
    }
    let response = next.call(req).await;
    if let Some(c) = &connection {
        c.answered();
    }
    response.map(ServiceResponse::map_into_left_body)
}

fn refusal(state: &AppState, req: &ServiceRequest) -> Option<HttpResponse> {
    let max = state.config.server.max_header_bytes;
    // actix-http already refuses heads over 128 KiB; this is the configured, lower bound on
    // what a sender can make the gateway store with each event.
    if header_bytes(req) > max {
        let mut response = error(
            actix_web::http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            &format!("the request's headers are over the {max} byte limit"),
        );
        response
            .head_mut()
            .set_connection_type(actix_web::http::ConnectionType::Close);
        return Some(response);
    }
    if let Some(metrics_port) = state.metrics_port {
        let on_metrics_listener = req.app_config().local_addr().port() == metrics_port;
        let wants_metrics = req.path() == METRICS_PATH;
        if on_metrics_listener != wants_metrics {
            return Some(error(
                actix_web::http::StatusCode::NOT_FOUND,
                "not_found",
                "no such route",
            ));
        }
    }
    None
}
