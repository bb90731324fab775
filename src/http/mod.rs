//! The HTTP layer (actix-web only): extract, call the use-case, map the result.

pub mod auth_failures;
mod connection;
mod edge;
mod error;
mod health;
mod ingest;
mod rate_limit;

use std::sync::Arc;

use actix_web::web;

use crate::config::GatewayConfig;
use crate::store::Store;

pub use connection::Connection;
pub use edge::edge;
pub use error::ApiError;
pub use rate_limit::RateLimiter;

/// Shared state handed to every handler.
pub struct AppState {
    pub store: Store,
    pub config: Arc<GatewayConfig>,
    /// Where tests hold an admin action to observe a request "still running".
    pub admin_pause: crate::admin::SharedPause,
    /// Group commit for ingest.
    pub batcher: crate::ingest::IngestBatcher,
    /// Ed25519 signatures of concurrent requests, checked together.
    pub ed25519: crate::verify::Ed25519Batch,
    /// Per-source ingress limits, for the sources that have one.
    pub rate_limits: std::collections::BTreeMap<String, RateLimiter>,
    pub metrics: Arc<crate::telemetry::Metrics>,
    /// The port of the listener that alone serves `/metrics` (`[metrics] listen`), if any.
    pub metrics_port: Option<u16>,
    /// Failed admin and console authentications per client address.
    pub auth_failures: auth_failures::AuthFailures,
    /// Raises `source.rejections`.
    pub alerts: crate::alerts::Alerts,
    /// Keeps requests that failed verification.
    pub quarantine: crate::quarantine::Quarantine,
    /// Runs reconciliations against providers' APIs (the admin API's on-demand runs).
    pub provider_reconciler: crate::reconcile::ProviderReconciler,
    /// Connections to broker destinations, for `/readyz` to report them.
    pub brokers: Arc<crate::delivery::Brokers>,
}

impl AppState {
    pub fn new(
        store: Store,
        config: Arc<GatewayConfig>,
        admin_pause: crate::admin::SharedPause,
        batcher: crate::ingest::IngestBatcher,
        metrics: Arc<crate::telemetry::Metrics>,
    ) -> Self {
        let rate_limits = config
            .sources
            .iter()
            .filter_map(|(name, s)| {
                s.rate_limit
                    .map(|(rate, burst)| (name.clone(), RateLimiter::new(rate, burst)))
            })
            .collect();
        let auth_failures = auth_failures::AuthFailures::new(
            config.admin.auth_failure_burst,
            config.admin.auth_failure_interval,
        );
        let provider_reconciler = crate::reconcile::ProviderReconciler::new(
            store.clone(),
            config.clone(),
            batcher.clone(),
            metrics.clone(),
        );
        Self {
            provider_reconciler,
            brokers: Arc::new(crate::delivery::Brokers::new(&config.destinations)),
            alerts: crate::alerts::Alerts::new(store.clone(), config.clone()),
            quarantine: crate::quarantine::Quarantine::start(
                store.clone(),
                &config.quarantine,
                metrics.clone(),
            ),
            store,
            config,
            admin_pause,
            batcher,
            ed25519: crate::verify::Ed25519Batch::new(),
            rate_limits,
            metrics,
            metrics_port: None,
            auth_failures,
        }
    }
}

/// Health, readiness and metrics: served by every role.
pub fn configure_probes(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(health::healthz))
        .route("/readyz", web::get().to(health::readyz))
        .route(edge::METRICS_PATH, web::get().to(health::metrics));
}

/// The ingest endpoint: served by the api role. Each configured source gets a route of its
/// own: actix matches a literal path by comparing strings, while a `{source}` segment runs a
/// regular expression on every request (a tenth of the gateway's instructions per webhook;
/// docs/decisions/per-source-literal-routes.md). The `{source}` route answers every other name.
/// A source answers GET only when its provider has a GET handshake (Dropbox, Meta); any other
/// method is answered 405 with `Allow`.
pub fn configure_ingest<'a>(
    cfg: &mut web::ServiceConfig,
    sources: impl Iterator<Item = (&'a str, bool)>,
) {
    for (name, answers_get) in sources {
        let source: Arc<str> = name.into();
        let post_source = source.clone();
        let mut resource = web::resource(format!("/webhooks/{name}")).route(web::post().to(
            move |state: web::Data<AppState>, request, payload| {
                let source = post_source.clone();
                async move { ingest::receive_webhook(state, request, &source, payload).await }
            },
        ));
        if answers_get {
            resource =
                resource
                    .route(
                        web::get().to(move |state: web::Data<AppState>, request, payload| {
                            let source = source.clone();
                            async move {
                                ingest::receive_webhook(state, request, &source, payload).await
                            }
                        }),
                    )
                    .default_service(web::to(ingest::method_not_allowed_get));
        } else {
            resource = resource.default_service(web::to(ingest::method_not_allowed));
        }
        cfg.service(resource);
    }
    cfg.service(
        web::resource("/webhooks/{source}")
            .route(web::post().to(ingest::receive_webhook_at))
            .default_service(web::to(ingest::method_not_allowed)),
    );
}
