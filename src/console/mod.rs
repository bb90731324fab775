//! The web console (`/console`): server-rendered pages over the admin actions, behind the
//! same admin tokens. A login sets an HttpOnly, SameSite=Strict session cookie; every form
//! carries a CSRF token bound to the session.

mod chart;
mod destinations;
mod handlers;
mod pages;
mod quarantine;
mod reconciliations;
mod request;
mod session;
mod undelivered;

use actix_web::{middleware, web};

pub use session::SESSION_IDLE_SECONDS;

/// Every console answer: no script may run and nothing may load from elsewhere (the pages
/// have none; this stops any markup that slipped through escaping from doing anything), no
/// framing (clickjacking), no referrer leaving with an event id in it, and no caching of
/// pages that show webhook contents.
fn security_headers() -> middleware::DefaultHeaders {
    middleware::DefaultHeaders::new()
        .add((
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ))
        .add(("X-Frame-Options", "DENY"))
        .add(("Referrer-Policy", "no-referrer"))
        .add(("Cache-Control", "no-store"))
        .add(("X-Content-Type-Options", "nosniff"))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/console")
            .wrap(security_headers())
            .route("", web::get().to(handlers::home))
            .route("/", web::get().to(handlers::home))
            .route("/login", web::get().to(handlers::login_form))
            .route("/login", web::post().to(handlers::login))
            .route("/logout", web::post().to(handlers::logout))
            .route("/events", web::get().to(handlers::events))
            .route("/events/{id}", web::get().to(handlers::event))
            .route("/events/{id}/replay", web::post().to(handlers::replay))
            .route("/dead-letters", web::get().to(handlers::dead_letters))
            .route("/sources", web::get().to(handlers::sources))
            .route(
                "/sources/{name}/reconciliations",
                web::get().to(reconciliations::list),
            )
            .route("/destinations", web::get().to(destinations::list))
            .route("/undelivered", web::get().to(undelivered::list))
            .route("/undelivered/retry", web::post().to(undelivered::retry))
            .route("/quarantine", web::get().to(quarantine::list))
            .route("/quarantine/verify", web::post().to(quarantine::verify_all))
            .route(
                "/quarantine/{id}/discard",
                web::post().to(quarantine::discard),
            )
            .route(
                "/destinations/{name}/pause",
                web::post().to(destinations::pause),
            )
            .route(
                "/destinations/{name}/resume",
                web::post().to(destinations::resume),
            )
            .route("/dead-letters/retry", web::post().to(handlers::bulk_retry))
            .route(
                "/dead-letters/discard",
                web::post().to(handlers::bulk_discard),
            )
            .route(
                "/dead-letters/{job_id}/retry",
                web::post().to(handlers::retry),
            )
            .route(
                "/dead-letters/{job_id}/discard",
                web::post().to(handlers::discard),
            ),
    );
}
