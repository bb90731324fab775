//! The admin API (`/admin/v1`), beside the ingest HTTP layer: tenant-scoped listing,
//! replay and dead-letter work, with Idempotency-Key on every POST.

mod auth;
pub(crate) mod cursor;
pub(crate) mod dead_letters;
mod error;
pub(crate) mod events;
mod idempotency;
mod openapi;
pub(crate) mod views;

use actix_web::web;

pub use auth::{authenticate, Tenant};
pub use error::AdminError;
pub use idempotency::{PausePoint, SharedPause};
pub use openapi::{document as openapi_document, AdminApi};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/admin/v1")
            .app_data(
                web::QueryConfig::default()
                    .error_handler(|e, _| AdminError::BadRequest(format!("query: {e}")).into()),
            )
            .route("/events", web::get().to(events::list_events))
            .route("/events/{id}", web::get().to(events::get_event))
            .route("/events/{id}/raw", web::get().to(events::raw_event))
            .route("/events/{id}/replay", web::post().to(events::replay_event))
            .route("/replay", web::post().to(events::bulk_replay))
            .route("/dead-letters", web::get().to(dead_letters::list))
            .route(
                "/dead-letters/retry",
                web::post().to(dead_letters::bulk_retry),
            )
            .route(
                "/dead-letters/{job_id}/retry",
                web::post().to(dead_letters::retry),
            )
            .route(
                "/dead-letters/{job_id}",
                web::delete().to(dead_letters::discard),
            )
            .route("/openapi.json", web::get().to(openapi::openapi_json)),
    );
}
