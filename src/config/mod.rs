//! Configuration: `Settings` is the file as written, `GatewayConfig` what it means.

mod broker;
mod destination;
mod github_app;
mod quarantine;
mod reconcile;
mod routes;
mod secret;
mod settings;
mod validate;

pub use broker::{NatsTarget, RabbitTarget};
pub use destination::{Circuit, Destination, RateLimit, Target};
pub use github_app::GitHubApp;
pub use quarantine::{QuarantineConfig, QuarantineSettings};
pub use reconcile::{ReconcileConfig, ReconcileProvider, ReconcileSettings};
pub use secret::resolve_secret;
pub use settings::{
    default_retry_schedule, AdminSettings, AdminTokenSettings, AlertsSettings, CircuitSettings,
    DatabaseSettings, DestinationSettings, LogSettings, MetricsSettings, RouteSettings,
    ServerSettings, Settings, SourceSettings, WorkerSettings,
};
pub use validate::{
    AdminConfig, AdminToken, AlertsConfig, DatabaseConfig, GatewayConfig, LogFormat, MetricsConfig,
    ServerConfig, Source, SqliteSynchronous, WorkerConfig, ALERTS_SOURCE,
};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Load(#[source] config::ConfigError),
    #[error("configuration key `{key}` {problem}")]
    Invalid { key: String, problem: String },
    #[error(transparent)]
    Provider(#[from] crate::verify::DefinitionError),
}
