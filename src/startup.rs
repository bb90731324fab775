//! Builds the whole gateway from settings. `main` and the integration tests both use this,
//! the tests with `server.listen = "127.0.0.1:0"`.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::{Server, ServerHandle};
use actix_web::{web, App, HttpResponse, HttpServer};
use serde_json::json;

use crate::config::{ConfigError, GatewayConfig, Settings};
use crate::http::{self, AppState};
use crate::store::{Store, StoreError};

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

pub struct Application {
    port: u16,
    server: Server,
    store: Store,
    config: Arc<GatewayConfig>,
}

impl Application {
    /// Validates the settings, connects the store, applies pending migrations, and binds.
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        let config = Arc::new(GatewayConfig::from_settings(&settings)?);
        let store = Store::connect(&config.database)?;
        store.migrate().await?;
        let address = config.server.listen.clone();
        let listener = TcpListener::bind(&address).map_err(|source| StartupError::Bind {
            address: address.clone(),
            source,
        })?;
        let port = listener
            .local_addr()
            .map_err(|source| StartupError::Bind { address, source })?
            .port();
        let server =
            run(listener, store.clone(), config.clone()).map_err(|source| StartupError::Bind {
                address: config.server.listen.clone(),
                source,
            })?;
        Ok(Self {
            port,
            server,
            store,
            config,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn config(&self) -> &GatewayConfig {
        &self.config
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

fn run(listener: TcpListener, store: Store, config: Arc<GatewayConfig>) -> std::io::Result<Server> {
    let request_timeout = config.server.request_timeout;
    let state = web::Data::new(AppState { store, config });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .configure(http::configure)
            .default_service(web::to(|| async {
                HttpResponse::NotFound()
                    .json(json!({"error": {"code": "not_found", "message": "no such route"}}))
            }))
    })
    .client_request_timeout(request_timeout)
    .listen(listener)?
    .run();
    Ok(server)
}
