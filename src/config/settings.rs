//! The configuration file as written: a TOML file, then `HOOKGATE__*` environment overrides.
//! Unknown keys are refused here; meaning is checked in `validate`.

use std::path::{Path, PathBuf};

use secrecy::SecretString;
use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(default)]
    pub server: ServerSettings,
    #[serde(default)]
    pub database: DatabaseSettings,
    #[serde(default)]
    pub log: LogSettings,
    #[serde(default)]
    pub worker: WorkerSettings,
    #[serde(default)]
    pub admin: AdminSettings,
    #[serde(default)]
    pub retention: RetentionSettings,
    #[serde(default)]
    pub metrics: MetricsSettings,
    /// Extra provider definitions; a file here replaces a built-in one of the same name.
    pub providers_dir: Option<PathBuf>,
    #[serde(default)]
    pub sources: Vec<SourceSettings>,
    #[serde(default)]
    pub destinations: Vec<DestinationSettings>,
    #[serde(default)]
    pub alerts: AlertsSettings,
    #[serde(default)]
    pub quarantine: super::quarantine::QuarantineSettings,
}

/// `[alerts]`: operational events sent to one destination, signed like every forward.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsSettings {
    /// The destination alerts go to; no alerts without one.
    pub destination: Option<String>,
    /// The tenant whose admin API and console show the alerts.
    #[serde(default = "default_tenant")]
    pub tenant: String,
    /// `delivery.lagging` when a destination's oldest due job is older than this.
    #[serde(default = "default_max_lag")]
    pub max_lag: String,
    /// `source.rejections` when one source has this many requests rejected in a minute.
    #[serde(default = "default_rejections_per_minute")]
    pub rejections_per_minute: u32,
}

impl Default for AlertsSettings {
    fn default() -> Self {
        Self {
            destination: None,
            tenant: default_tenant(),
            max_lag: default_max_lag(),
            rejections_per_minute: default_rejections_per_minute(),
        }
    }
}

fn default_max_lag() -> String {
    "10m".into()
}
fn default_rejections_per_minute() -> u32 {
    100
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    #[serde(default = "default_listen")]
    pub listen: String,
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Seconds suggested in `Retry-After` when the store cannot take a request.
    #[serde(default = "default_retry_after")]
    pub retry_after_seconds: u64,
    /// How long a client may take to send its headers (slow clients are cut off).
    #[serde(default = "default_request_timeout")]
    pub request_timeout: String,
    /// Group commit: at most this many concurrent ingest requests share one transaction.
    #[serde(default = "default_ingest_batch_max")]
    pub ingest_batch_max: usize,
    /// Group commit: ingest transactions in flight at once (SQLite always uses 1).
    #[serde(default = "default_ingest_writers")]
    pub ingest_writers: usize,
    /// The request's header lines may hold at most this many bytes (431 above).
    #[serde(default = "default_max_header_bytes")]
    pub max_header_bytes: usize,
}

fn default_max_header_bytes() -> usize {
    32 * 1024
}

/// Who may read `/metrics`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSettings {
    /// Serve `/metrics` on this address only (e.g. `127.0.0.1:9090`), not on `server.listen`.
    pub listen: Option<String>,
    /// Require `Authorization: Bearer <token>` on `/metrics` (a secret: literal, `env:` or
    /// `file:`).
    pub token: Option<SecretString>,
}

fn default_ingest_batch_max() -> usize {
    128
}
fn default_ingest_writers() -> usize {
    2
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            max_body_bytes: default_max_body_bytes(),
            retry_after_seconds: default_retry_after(),
            request_timeout: default_request_timeout(),
            ingest_batch_max: default_ingest_batch_max(),
            ingest_writers: default_ingest_writers(),
            max_header_bytes: default_max_header_bytes(),
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:8080".into()
}
fn default_max_body_bytes() -> usize {
    1024 * 1024
}
fn default_retry_after() -> u64 {
    5
}
fn default_request_timeout() -> String {
    "10s".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `sqlite://path.db` (the default) or `postgres://user@host:5432/db`.
    #[serde(default = "default_database_url")]
    pub url: String,
    /// PostgreSQL only: a streaming replica of `url` that serves the admin API's and the
    /// console's listings and searches (events, dead letters, undelivered). Writes, claims,
    /// ingest and single-record reads stay on `url`.
    #[serde(default)]
    pub read_url: Option<String>,
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// How long a request waits for a connection before it is answered 503.
    #[serde(default = "default_acquire_timeout")]
    pub acquire_timeout: String,
    /// SQLite only: how long a writer waits for the write lock.
    #[serde(default = "default_busy_timeout")]
    pub busy_timeout: String,
    /// SQLite only: `full` (a 2xx survives a power loss) or `normal` (a 2xx survives a
    /// process crash; the last commits before a power loss may be lost).
    #[serde(default = "default_sqlite_synchronous")]
    pub sqlite_synchronous: String,
    /// PostgreSQL only: the span of each time partition of events, jobs and attempts
    /// (retention drops whole partitions, so an event outlives `retention.events` by up
    /// to this). Between 1 hour and 31 days; a change applies to partitions created after it.
    #[serde(default = "default_partition_interval")]
    pub partition_interval: String,
}

fn default_partition_interval() -> String {
    "1day".into()
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: default_database_url(),
            read_url: None,
            max_connections: default_max_connections(),
            acquire_timeout: default_acquire_timeout(),
            busy_timeout: default_busy_timeout(),
            sqlite_synchronous: default_sqlite_synchronous(),
            partition_interval: default_partition_interval(),
        }
    }
}

fn default_sqlite_synchronous() -> String {
    "full".into()
}
fn default_database_url() -> String {
    "sqlite://hookgate.db".into()
}
fn default_max_connections() -> u32 {
    10
}
fn default_acquire_timeout() -> String {
    "5s".into()
}
fn default_busy_timeout() -> String {
    "5s".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSettings {
    /// Deliveries one process runs at once, over all destinations.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// How long a claimed job is reserved; a long delivery renews it.
    #[serde(default = "default_lease")]
    pub lease: String,
    /// How often an idle worker looks for due jobs (PostgreSQL also wakes it on NOTIFY).
    #[serde(default = "default_poll_interval")]
    pub poll_interval: String,
    /// How long the worker lets work gather before its next claim or outcome statement.
    #[serde(default = "default_batch_window")]
    pub batch_window: String,
    /// In a process that also ingests: new jobs go straight to this process's workers when
    /// they have room and no backlog, claimed in the transaction that creates them.
    #[serde(default = "default_handoff")]
    pub handoff: bool,
    /// On SIGINT/SIGTERM, how long in-flight deliveries may take to finish.
    #[serde(default = "default_shutdown_grace")]
    pub shutdown_grace: String,
    /// How often the reconciler sweeps for expired leases and missing jobs.
    #[serde(default = "default_reconcile_interval")]
    pub reconcile_interval: String,
    /// How far back the reconciler looks for events missing a job.
    #[serde(default = "default_reconcile_lookback")]
    pub reconcile_lookback: String,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            concurrency: default_concurrency(),
            lease: default_lease(),
            poll_interval: default_poll_interval(),
            batch_window: default_batch_window(),
            handoff: default_handoff(),
            shutdown_grace: default_shutdown_grace(),
            reconcile_interval: default_reconcile_interval(),
            reconcile_lookback: default_reconcile_lookback(),
        }
    }
}

fn default_concurrency() -> usize {
    32
}
fn default_lease() -> String {
    "30s".into()
}
fn default_poll_interval() -> String {
    "1s".into()
}
fn default_handoff() -> bool {
    true
}
fn default_batch_window() -> String {
    "5ms".into()
}
fn default_shutdown_grace() -> String {
    "10s".into()
}
fn default_reconcile_interval() -> String {
    "30s".into()
}
fn default_reconcile_lookback() -> String {
    "24h".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSettings {
    /// Bearer tokens, stored only as SHA-256 digests (`hookgate token new` makes one).
    #[serde(default)]
    pub tokens: Vec<AdminTokenSettings>,
    /// How long a saved Idempotency-Key response is kept.
    #[serde(default = "default_idempotency_ttl")]
    pub idempotency_ttl: String,
    /// A request still running after this long is taken as abandoned; its key can be reused.
    #[serde(default = "default_idempotency_stale_after")]
    pub idempotency_stale_after: String,
    /// Failed authentications (admin API and console) one client address may make at once;
    /// then one more per `auth_failure_interval`, and 429 meanwhile.
    #[serde(default = "default_auth_failure_burst")]
    pub auth_failure_burst: u32,
    #[serde(default = "default_auth_failure_interval")]
    pub auth_failure_interval: String,
}

impl Default for AdminSettings {
    fn default() -> Self {
        Self {
            tokens: Vec::new(),
            idempotency_ttl: default_idempotency_ttl(),
            idempotency_stale_after: default_idempotency_stale_after(),
            auth_failure_burst: default_auth_failure_burst(),
            auth_failure_interval: default_auth_failure_interval(),
        }
    }
}

fn default_auth_failure_burst() -> u32 {
    20
}
fn default_auth_failure_interval() -> String {
    "3s".into()
}

fn default_idempotency_ttl() -> String {
    "24h".into()
}
fn default_idempotency_stale_after() -> String {
    "5m".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminTokenSettings {
    pub tenant: String,
    /// Lower- or upper-case hex SHA-256 of the token.
    pub token_sha256: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    /// How long events (bodies, headers) and their delivery history are kept.
    #[serde(default = "default_retention")]
    pub events: String,
    /// How long provider event ids are remembered for dedupe (at least 3 days).
    #[serde(default = "default_retention")]
    pub dedupe_window: String,
    /// Accept a dedupe window under 3 days (providers retry for up to 3 days).
    #[serde(default)]
    pub force_short_dedupe_window: bool,
    /// Rows deleted per transaction by the sweep.
    #[serde(default = "default_retention_batch")]
    pub batch: i64,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        Self {
            events: default_retention(),
            dedupe_window: default_retention(),
            force_short_dedupe_window: false,
            batch: default_retention_batch(),
        }
    }
}

fn default_retention() -> String {
    "30days".into()
}
fn default_retention_batch() -> i64 {
    1000
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    /// "text" (default) or "json".
    #[serde(default)]
    pub format: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSettings {
    pub name: String,
    pub provider: String,
    /// Literal, `env:VAR` or `file:/path`; see README "Secrets".
    #[serde(default)]
    pub secrets: Vec<SecretString>,
    #[serde(default = "default_tenant")]
    pub tenant: String,
    /// Unfiltered routes: every event goes to each of these destinations.
    #[serde(default)]
    pub destinations: Vec<String>,
    /// Routes with conditions (`[[sources.routes]]`), after those of `destinations`.
    #[serde(default)]
    pub routes: Vec<RouteSettings>,
    pub signature_header: Option<String>,
    pub signature_encoding: Option<String>,
    pub signature_prefix: Option<String>,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    /// The URL the provider calls, as it calls it (scheme, host, port, path; no query), for
    /// providers that sign the URL (Twilio, Square, HubSpot).
    pub public_url: Option<String>,
    /// The token a provider's GET handshake must carry (Meta's `hub.verify_token`); a secret.
    pub verify_token: Option<SecretString>,
    /// A private test key `hookgate send` signs with, for public-key providers (Discord,
    /// SendGrid, Standard Webhooks v1a); a secret. Never needed to receive webhooks.
    pub signing_key: Option<SecretString>,
    /// Ingress limit: requests per second this source may send (unlimited when absent).
    pub rate_limit_per_second: Option<u32>,
    /// Requests allowed at once above the sustained rate (default: one second's worth).
    pub rate_limit_burst: Option<u32>,
    /// Reconciliation against the provider's API (`[sources.reconcile]`); none when absent.
    pub reconcile: Option<super::reconcile::ReconcileSettings>,
}

/// One `[[sources.routes]]` table: a destination and the conditions to go there (see
/// docs/ROUTING.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSettings {
    pub destination: String,
    /// Exact names and globs (`invoice.*`); the event's type must match one.
    #[serde(default)]
    pub event_types: Option<Vec<String>>,
    /// A JSON filter on the body.
    #[serde(rename = "match")]
    pub body: Option<serde_json::Value>,
    /// A JSON filter on the headers, names in any case.
    pub match_headers: Option<serde_json::Value>,
    /// The job is due no earlier than this after receipt (`"10m"`).
    pub delay: Option<String>,
    /// Where the event's ordering key is read (`"json:/data/object/customer"`,
    /// `"header:X-Shopify-Shop-Domain"`): this destination's jobs sharing a key are
    /// delivered one at a time, in ingest order.
    pub ordering_key: Option<String>,
    /// With `ordering_key`: `"hold"` (default) keeps a key blocked behind its dead letter
    /// until it is retried or discarded; `"skip"` lets the next job go.
    pub on_dead_letter: Option<String>,
}

fn default_tenant() -> String {
    "default".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationSettings {
    pub name: String,
    /// `"http"` (the default), `"nats"` (JetStream) or `"rabbitmq"`.
    #[serde(default = "default_destination_kind")]
    pub kind: String,
    /// The receiver's URL; for a broker, its server (`nats://…`, `amqp://…`), which may be a
    /// secret reference (`env:AMQP_URL`) since it can carry credentials.
    pub url: String,
    /// Signs every delivery (`whsec_…`); required for HTTP, optional for a broker.
    pub signing_secret: Option<SecretString>,
    /// NATS: the subject template (`webhooks.{source}.{event_type}`).
    pub subject: Option<String>,
    /// NATS: the stream that must take the message (its name is sent as the expected stream).
    pub stream: Option<String>,
    /// RabbitMQ: the exchange template (`""` is the default exchange).
    pub exchange: Option<String>,
    /// RabbitMQ: the routing-key template (`{source}.{event_type}`).
    pub routing_key: Option<String>,
    #[serde(default = "default_retry_schedule")]
    pub retry_schedule: Vec<String>,
    #[serde(default = "default_delivery_timeout")]
    pub timeout: String,
    /// Deliveries to this destination one process runs at once.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// Extra request headers, each value a secret reference (literal, `env:` or `file:`):
    /// `headers = { Authorization = "env:SINK_TOKEN" }`.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, SecretString>,
    /// A circuit breaker (`[destinations.circuit]`); none when absent.
    pub circuit: Option<CircuitSettings>,
    /// Deliveries per second or minute over all processes sharing the database
    /// (`"50/s"`, `"3000/min"`); unlimited when absent.
    pub rate_limit: Option<String>,
}

/// `[destinations.circuit]`: after `failures` failed attempts in a row the destination trips;
/// its jobs are held, and one probe delivery is tried after each `cool_down`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CircuitSettings {
    pub failures: u32,
    #[serde(default = "default_cool_down")]
    pub cool_down: String,
}

fn default_destination_kind() -> String {
    "http".into()
}

fn default_cool_down() -> String {
    "1m".into()
}

fn default_max_in_flight() -> usize {
    8
}

pub fn default_retry_schedule() -> Vec<String> {
    ["5s", "5m", "30m", "2h", "5h", "10h", "10h"]
        .map(String::from)
        .to_vec()
}

fn default_delivery_timeout() -> String {
    "15s".into()
}

impl Settings {
    /// Reads `path`, then applies `HOOKGATE__SECTION__KEY` environment overrides.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with_env(path, std::env::vars())
    }

    pub fn load_with_env(
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        if !path.exists() {
            return Err(ConfigError::Invalid {
                key: "--config".into(),
                problem: format!("file {} does not exist", path.display()),
            });
        }
        let env: config::Map<String, String> = env
            .into_iter()
            .filter(|(k, _)| k.starts_with("HOOKGATE__"))
            .collect();
        config::Config::builder()
            .add_source(config::File::from(path).format(config::FileFormat::Toml))
            .add_source(
                config::Environment::with_prefix("HOOKGATE")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true)
                    .source(Some(env)),
            )
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(ConfigError::Load)
    }

    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(ConfigError::Load)
    }
}
