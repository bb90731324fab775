//! The HTTP layer (actix-web only): extract, call the use-case, map the result.

mod error;
mod health;
mod ingest;

use std::sync::Arc;

use actix_web::web;

use crate::config::GatewayConfig;
use crate::store::Store;

pub use error::ApiError;

/// Shared state handed to every handler.
pub struct AppState {
    pub store: Store,
    pub config: Arc<GatewayConfig>,
    /// Where tests hold an admin action to observe a request "still running".
    pub admin_pause: crate::admin::SharedPause,
    /// Group commit for ingest.
    pub batcher: crate::ingest::IngestBatcher,
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(health::healthz))
        .route("/readyz", web::get().to(health::readyz))
        .route(
            "/webhooks/{source}",
            web::post().to(ingest::receive_webhook),
        );
}
