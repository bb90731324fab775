//! Builds the whole gateway from settings. `main` and the integration tests both use this,
//! the tests with `server.listen = "127.0.0.1:0"`.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::{Server, ServerHandle};
use actix_web::{web, App, HttpResponse, HttpServer};
use serde_json::json;

use crate::admin::SharedPause;
use crate::config::{ConfigError, GatewayConfig, Settings};
use crate::http::{self, AppState};
use crate::ingest::IngestBatcher;
use crate::store::{Store, StoreError};
use crate::telemetry::Metrics;
use crate::worker::{Reconciler, Worker};
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        #[source]
        source: std::io::Error,
    },
}

/// Which side of the gateway a process runs, so the two can be scaled apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// The HTTP server only (ingest, health).
    Api,
    /// Delivery workers and the reconciler only.
    Worker,
    /// Both.
    All,
}

pub struct Application {
    port: u16,
    server: Server,
    store: Store,
    config: Arc<GatewayConfig>,
    admin_pause: SharedPause,
    batcher: IngestBatcher,
    metrics: Arc<Metrics>,
    metrics_port: Option<u16>,
    quarantine: crate::quarantine::Quarantine,
    provider_reconciler: crate::reconcile::ProviderReconciler,
}

impl Application {
    /// Validates the settings, connects the store, applies pending migrations, and binds the
    /// HTTP server. Workers are separate (`BackgroundWork`), so tests can drive them by hand.
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        Self::build_with_role(settings, Role::Api).await
    }

    /// As `build`; a `Worker` role serves only `/healthz`, `/readyz` and `/metrics`.
    pub async fn build_with_role(settings: Settings, role: Role) -> Result<Self, StartupError> {
        let config = Arc::new(GatewayConfig::from_settings(&settings)?);
        let store = Store::connect(&config.database)?;
        store.migrate().await?;
        store.spawn_maintenance();
        let address = config.server.listen.clone();
        let listener = TcpListener::bind(&address).map_err(|source| StartupError::Bind {
            address: address.clone(),
            source,
        })?;
        let port = listener
            .local_addr()
            .map_err(|source| StartupError::Bind { address, source })?
            .port();
        let admin_pause = SharedPause::default();
        let batcher = IngestBatcher::start(
            store.clone(),
            store.write_parallelism(config.server.ingest_writers),
            config.server.ingest_batch_max,
        );
        let metrics = Arc::new(Metrics::new().counting_batches_of(batcher.clone()));
        let mut state = AppState::new(
            store.clone(),
            config.clone(),
            admin_pause.clone(),
            batcher.clone(),
            metrics.clone(),
        );
        let metrics_listener = match &config.metrics.listen {
            Some(address) => {
                let bind_error = |source| StartupError::Bind {
                    address: address.clone(),
                    source,
                };
                let l = TcpListener::bind(address).map_err(bind_error)?;
                state.metrics_port = Some(l.local_addr().map_err(bind_error)?.port());
                Some(l)
            }
            None => None,
        };
        let metrics_port = state.metrics_port;
        let quarantine = state.quarantine.clone();
        let provider_reconciler = state.provider_reconciler.clone();
        let server =
            run(listener, metrics_listener, state, role).map_err(|source| StartupError::Bind {
                address: config.server.listen.clone(),
                source,
            })?;
        Ok(Self {
            port,
            server,
            store,
            config,
            admin_pause,
            batcher,
            metrics,
            metrics_port,
            quarantine,
            provider_reconciler,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port of `[metrics] listen`, when `/metrics` has a listener of its own.
    pub fn metrics_port(&self) -> Option<u16> {
        self.metrics_port
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn config(&self) -> &Arc<GatewayConfig> {
        &self.config
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The ingest group-commit writer (tests hold it to batch requests together).
    pub fn batcher(&self) -> &IngestBatcher {
        &self.batcher
    }

    /// Where requests that failed verification go (tests flush it).
    pub fn quarantine(&self) -> &crate::quarantine::Quarantine {
        &self.quarantine
    }

    /// Reconciliation against providers' APIs; a process with background work runs
    /// `run_on_schedule` (see `cli::serve`).
    pub fn provider_reconciler(&self) -> &crate::reconcile::ProviderReconciler {
        &self.provider_reconciler
    }

    /// Tests arm this to hold an admin action mid-way (see `admin::PausePoint`).
    pub fn admin_pause(&self) -> &SharedPause {
        &self.admin_pause
    }

    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until the server is stopped (SIGINT/SIGTERM, or `handle().stop()`), then
    /// finishes in-flight requests.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.server.await
    }
}

/// The runtime for everything but the HTTP workers (which actix runs on threads of their own,
/// one per core): ingest writers, database connections, delivery workers. Half the cores, at
/// least one, unless `TOKIO_WORKER_THREADS` says otherwise: on a small machine, more threads
/// here mostly add hand-offs between threads (docs/decisions/background-runtime-threads.md).
pub fn background_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        builder.worker_threads((cores / 2).max(1));
    }
    builder.enable_all().build()
}

fn run(
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    state: AppState,
    role: Role,
) -> std::io::Result<Server> {
    let request_timeout = state.config.server.request_timeout;
    let sources: Vec<(String, bool)> = state
        .config
        .sources
        .iter()
        .map(|(name, s)| (name.clone(), s.verifier.definition().answers_get()))
        .collect();
    let state = web::Data::new(state);
    let server = HttpServer::new(move || {
        App::new()
            .wrap(actix_web::middleware::from_fn(http::edge))
            .app_data(state.clone())
            .configure(http::configure_probes)
            .configure(|cfg| {
                if role != Role::Worker {
                    http::configure_ingest(cfg, sources.iter().map(|(n, get)| (n.as_str(), *get)));
                    crate::admin::configure(cfg);
                    crate::console::configure(cfg);
                }
            })
            .default_service(web::to(|| async {
                HttpResponse::NotFound()
                    .json(json!({"error": {"code": "not_found", "message": "no such route"}}))
            }))
    })
    .client_request_timeout(request_timeout)
    .on_connect(move |connection, data| {
        if let Some(watch) = http::Connection::watch(connection, request_timeout) {
            data.insert(Arc::new(watch));
        }
    })
    // Signals are handled in one place (cli::serve) so workers and server stop together.
    .disable_signals()
    .listen(listener)?;
    let server = match metrics_listener {
        Some(l) => server.listen(l)?,
        None => server,
    };
    Ok(server.run())
}

/// The worker pool and the periodic reconciler of one process.
pub struct BackgroundWork {
    worker: Arc<Worker>,
    reconciler: Reconciler,
    interval: std::time::Duration,
}

impl BackgroundWork {
    pub fn new(store: Store, config: Arc<GatewayConfig>, metrics: Arc<Metrics>) -> Self {
        Self {
            worker: Arc::new(
                Worker::new(store.clone(), config.clone()).with_metrics(metrics.clone()),
            ),
            reconciler: Reconciler::new(store, config.clone()).with_metrics(metrics),
            interval: config.worker.reconcile_interval,
        }
    }

    /// This process's workers' side of ingest's hand-off (see `queue::Handoff`).
    pub fn handoff(&self) -> crate::queue::Handoff {
        self.worker.handoff()
    }

    /// Runs until `shutdown` turns true, then drains (see `Worker::run`).
    pub async fn run(self, shutdown: watch::Receiver<bool>) {
        let reconciler = self.reconciler;
        let interval = self.interval;
        let mut reconcile_shutdown = shutdown.clone();
        let sweeps = tokio::spawn(async move {
            loop {
                if let Err(e) = reconciler.sweep().await {
                    tracing::warn!(error = %e, "reconciler sweep failed");
                }
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = reconcile_shutdown.changed() => return,
                }
            }
        });
        self.worker.run(shutdown).await;
        let _ = sweeps.await;
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler installs");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
