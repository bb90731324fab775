//! The admin API (`/admin/v1`), beside the ingest HTTP layer: tenant-scoped listing,
//! replay and dead-letter work, with Idempotency-Key on every POST.

mod auth;
pub(crate) mod cursor;
pub(crate) mod dead_letters;
pub(crate) mod destinations;
mod error;
pub(crate) mod events;
mod idempotency;
mod openapi;
pub(crate) mod quarantine;
pub(crate) mod reconciliations;
pub(crate) mod sources;
pub(crate) mod undelivered;
pub(crate) mod views;

use actix_web::dev::ServiceResponse;
use actix_web::http::{header, StatusCode};
use actix_web::middleware::{ErrorHandlerResponse, ErrorHandlers};
use actix_web::{web, HttpResponse};

/// The largest admin request body: far above any real one (filters, a list of destinations).
pub const MAX_BODY_BYTES: usize = 256 * 1024;

pub use auth::{authenticate, Tenant};
pub use error::AdminError;
pub use idempotency::{PausePoint, SharedPause};
pub use openapi::{document as openapi_document, AdminApi};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/admin/v1")
            .wrap(ErrorHandlers::new().handler(StatusCode::PAYLOAD_TOO_LARGE, payload_too_large))
            .app_data(web::PayloadConfig::new(MAX_BODY_BYTES))
            .app_data(
                web::QueryConfig::default()
                    .error_handler(|e, _| AdminError::BadRequest(format!("query: {e}")).into()),
            )
            .service(resource("/events", "GET").route(web::get().to(events::list_events)))
            .service(resource("/events/{id}", "GET").route(web::get().to(events::get_event)))
            .service(resource("/events/{id}/raw", "GET").route(web::get().to(events::raw_event)))
            .service(
                resource("/events/{id}/replay", "POST").route(web::post().to(events::replay_event)),
            )
            .service(resource("/replay", "POST").route(web::post().to(events::bulk_replay)))
            .service(resource("/dead-letters", "GET").route(web::get().to(dead_letters::list)))
            .service(
                resource("/dead-letters/retry", "POST")
                    .route(web::post().to(dead_letters::bulk_retry)),
            )
            .service(
                resource("/dead-letters/{job_id}/retry", "POST")
                    .route(web::post().to(dead_letters::retry)),
            )
            .service(
                resource("/dead-letters/{job_id}", "DELETE")
                    .route(web::delete().to(dead_letters::discard)),
            )
            .service(resource("/sources", "GET").route(web::get().to(sources::list)))
            .service(resource("/undelivered", "GET").route(web::get().to(undelivered::list)))
            .service(
                resource("/undelivered/retry", "POST").route(web::post().to(undelivered::retry)),
            )
            .service(resource("/destinations", "GET").route(web::get().to(destinations::list)))
            .service(
                resource("/destinations/{name}", "GET").route(web::get().to(destinations::get)),
            )
            .service(
                resource("/destinations/{name}/pause", "POST")
                    .route(web::post().to(destinations::pause)),
            )
            .service(
                resource("/destinations/{name}/resume", "POST")
                    .route(web::post().to(destinations::resume)),
            )
            .service(resource("/quarantine", "GET").route(web::get().to(quarantine::list)))
            .service(
                resource("/quarantine/verify", "POST")
                    .route(web::post().to(quarantine::bulk_verify)),
            )
            .service(
                resource("/quarantine/{id}", "GET, DELETE")
                    .route(web::get().to(quarantine::get))
                    .route(web::delete().to(quarantine::discard)),
            )
            .service(
                resource("/quarantine/{id}/verify", "POST")
                    .route(web::post().to(quarantine::verify)),
            )
            .service(
                resource("/sources/{name}/reconciliations", "GET, POST")
                    .route(web::get().to(reconciliations::list))
                    .route(web::post().to(reconciliations::run)),
            )
            .service(resource("/openapi.json", "GET").route(web::get().to(openapi::openapi_json))),
    );
}

/// The body extractor's 413 in the admin API's error format, not actix's plain text.
fn payload_too_large<B>(res: ServiceResponse<B>) -> actix_web::Result<ErrorHandlerResponse<B>> {
    let (request, _) = res.into_parts();
    let response = HttpResponse::PayloadTooLarge().json(serde_json::json!({"error": {
        "code": "payload_too_large",
        "message": format!("the body is larger than {MAX_BODY_BYTES} bytes"),
    }}));
    Ok(ErrorHandlerResponse::Response(
        ServiceResponse::new(request, response).map_into_right_body(),
    ))
}

/// A route whose other methods answer 405 with `Allow` (RFC 9110), not the app's 404.
fn resource(path: &str, allow: &'static str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(move || async move {
        HttpResponse::MethodNotAllowed()
            .insert_header((header::ALLOW, allow))
            .json(serde_json::json!({"error": {
                "code": "method_not_allowed",
                "message": format!("this path allows {allow} only"),
            }}))
    }))
}
