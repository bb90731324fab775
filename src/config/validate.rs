//! Turns `Settings` into a `GatewayConfig`: every reference resolved, every value parsed.
//! Errors name the offending key, e.g. `sources[1].provider`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use secrecy::ExposeSecret;
use sha2::Digest as _;

use super::destination::Destination;
use super::secret::resolve_secret;
use super::settings::Settings;
use super::ConfigError;
use crate::domain::Name;
use crate::routing::RouteTable;
use crate::verify::{ProviderRegistry, SourceOverrides, SourceVerifier};

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: String,
    pub max_body_bytes: usize,
    pub retry_after_seconds: u64,
    pub request_timeout: Duration,
    pub ingest_batch_max: usize,
    pub ingest_writers: usize,
    pub max_header_bytes: usize,
}

/// Who may read `/metrics`: by default anyone who reaches `server.listen`.
#[derive(Debug, Clone, Default)]
pub struct MetricsConfig {
    /// `/metrics` is served on this address only.
    pub listen: Option<String>,
    /// SHA-256 of the bearer token `/metrics` requires.
    pub token_sha256: Option<[u8; 32]>,
}

#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    pub url: String,
    /// A read replica for admin listings (PostgreSQL only).
    pub read_url: Option<String>,
    pub max_connections: u32,
    pub acquire_timeout: Duration,
    pub busy_timeout: Duration,
    pub sqlite_synchronous: SqliteSynchronous,
    /// The span of each time partition of PostgreSQL's events, jobs and attempts.
    pub partition_interval: Duration,
}

/// How far a SQLite commit is flushed before the gateway answers 2xx (WAL mode either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqliteSynchronous {
    /// The WAL is fsynced at every commit: a 2xx survives a power loss.
    Full,
    /// The WAL is written at every commit and fsynced at checkpoints: a 2xx survives a
    /// process crash, not a power loss.
    Normal,
}

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub concurrency: usize,
    pub lease: Duration,
    pub poll_interval: Duration,
    /// After a claim in which every destination had fewer due jobs than free slots, the next
    /// claim waits this long; the outcome writer waits up to this long to fill a batch.
    pub batch_window: Duration,
    /// Ingest claims new jobs for this process's workers as it creates them (role `all`).
    pub handoff: bool,
    pub shutdown_grace: Duration,
    pub reconcile_interval: Duration,
    pub reconcile_lookback: Duration,
}

/// An admin token: the tenant it acts for and the SHA-256 of the bearer token.
#[derive(Clone)]
pub struct AdminToken {
    pub tenant: Name,
    pub sha256: [u8; 32],
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminToken")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub tokens: Vec<AdminToken>,
    pub idempotency_ttl: Duration,
    pub idempotency_stale_after: Duration,
    pub auth_failure_burst: u32,
    pub auth_failure_interval: Duration,
}

#[derive(Debug, Clone)]
pub struct RetentionConfig {
    pub events: Duration,
    pub dedupe_window: Duration,
    pub batch: i64,
}

/// The longest common provider retry window (Stripe retries for 3 days).
pub const MIN_DEDUPE_WINDOW: Duration = Duration::from_secs(3 * 24 * 3600);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug)]
pub struct Source {
    pub name: Name,
    pub tenant: Name,
    pub provider: String,
    pub verifier: SourceVerifier,
    /// Every destination a route names, each once, in configuration order.
    pub destinations: Vec<Name>,
    pub routes: RouteTable,
    /// (requests per second, burst), when the source is rate limited.
    pub rate_limit: Option<(u32, u32)>,
    /// Reconciliation against the provider's API, when configured.
    pub reconcile: Option<super::reconcile::ReconcileConfig>,
}

/// `[alerts]`, when it names a destination.
#[derive(Debug, Clone)]
pub struct AlertsConfig {
    pub destination: Name,
    pub tenant: Name,
    pub max_lag: Duration,
    pub rejections_per_minute: u32,
}

/// The source name alerts are stored under; no configured source may take it.
pub const ALERTS_SOURCE: &str = "hookgate-alerts";

#[derive(Debug)]
pub struct GatewayConfig {
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub log_format: LogFormat,
    pub worker: WorkerConfig,
    pub admin: AdminConfig,
    pub retention: RetentionConfig,
    pub metrics: MetricsConfig,
    pub sources: BTreeMap<String, Arc<Source>>,
    pub destinations: BTreeMap<String, Arc<Destination>>,
    pub alerts: Option<AlertsConfig>,
    pub quarantine: super::QuarantineConfig,
}

pub(super) fn invalid(key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        problem: problem.into(),
    }
}

pub(super) fn duration(key: &str, value: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(value).map_err(|e| {
        invalid(
            key,
            format!("is {value:?}, not a duration like \"5s\": {e}"),
        )
    })
}

impl GatewayConfig {
    pub fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        let registry = ProviderRegistry::load(settings.providers_dir.as_deref())?;
        let s = &settings.server;
        if s.max_body_bytes == 0 {
            return Err(invalid("server.max_body_bytes", "must be positive"));
        }
        let server = ServerConfig {
            listen: s.listen.clone(),
            max_body_bytes: s.max_body_bytes,
            retry_after_seconds: s.retry_after_seconds.max(1),
            request_timeout: duration("server.request_timeout", &s.request_timeout)?,
            ingest_batch_max: s.ingest_batch_max,
            ingest_writers: s.ingest_writers,
            max_header_bytes: s.max_header_bytes,
        };
        if server.max_header_bytes < 1024 {
            return Err(invalid("server.max_header_bytes", "must be at least 1024"));
        }
        if server.ingest_batch_max == 0 {
            return Err(invalid("server.ingest_batch_max", "must be positive"));
        }
        if server.ingest_writers == 0 {
            return Err(invalid("server.ingest_writers", "must be positive"));
        }
        let d = &settings.database;
        if !(d.url.starts_with("sqlite:")
            || d.url.starts_with("postgres://")
            || d.url.starts_with("postgresql://"))
        {
            return Err(invalid(
                "database.url",
                "must start with sqlite:, postgres:// or postgresql://",
            ));
        }
        if d.max_connections == 0 {
            return Err(invalid("database.max_connections", "must be positive"));
        }
        if let Some(read) = &d.read_url {
            if d.url.starts_with("sqlite:") {
                return Err(invalid(
                    "database.read_url",
                    "is for PostgreSQL: SQLite has no replicas",
                ));
            }
            if !(read.starts_with("postgres://") || read.starts_with("postgresql://")) {
                return Err(invalid(
                    "database.read_url",
                    "must start with postgres:// or postgresql://",
                ));
            }
        }
        let partition_interval = duration("database.partition_interval", &d.partition_interval)?;
        if !(Duration::from_secs(3600)..=Duration::from_secs(31 * 86_400))
            .contains(&partition_interval)
        {
            return Err(invalid(
                "database.partition_interval",
                "must be between 1 hour and 31 days",
            ));
        }
        let database = DatabaseConfig {
            partition_interval,
            url: d.url.clone(),
            read_url: d.read_url.clone(),
            max_connections: d.max_connections,
            acquire_timeout: duration("database.acquire_timeout", &d.acquire_timeout)?,
            busy_timeout: duration("database.busy_timeout", &d.busy_timeout)?,
            sqlite_synchronous: match d.sqlite_synchronous.as_str() {
                "full" => SqliteSynchronous::Full,
                "normal" => SqliteSynchronous::Normal,
                _ => {
                    return Err(invalid(
                        "database.sqlite_synchronous",
                        "must be \"full\" or \"normal\"",
                    ))
                }
            },
        };
        let log_format = match settings.log.format.as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(invalid(
                    "log.format",
                    format!("is {other:?}; expected \"text\" or \"json\""),
                ))
            }
        };

        let w = &settings.worker;
        if w.concurrency == 0 {
            return Err(invalid("worker.concurrency", "must be positive"));
        }
        let worker = WorkerConfig {
            concurrency: w.concurrency,
            lease: duration("worker.lease", &w.lease)?,
            poll_interval: duration("worker.poll_interval", &w.poll_interval)?,
            batch_window: duration("worker.batch_window", &w.batch_window)?,
            handoff: w.handoff,
            shutdown_grace: duration("worker.shutdown_grace", &w.shutdown_grace)?,
            reconcile_interval: duration("worker.reconcile_interval", &w.reconcile_interval)?,
            reconcile_lookback: duration("worker.reconcile_lookback", &w.reconcile_lookback)?,
        };
        if worker.lease < Duration::from_secs(1) {
            return Err(invalid("worker.lease", "must be at least 1s"));
        }
        if worker.batch_window > Duration::from_secs(1) {
            // Every delivery may wait this long before its claim: seconds would be a mistake.
            return Err(invalid("worker.batch_window", "must be at most 1s"));
        }

        let a = &settings.admin;
        let mut tokens = Vec::new();
        for (i, t) in a.tokens.iter().enumerate() {
            let tenant = Name::parse("tenant", &t.tenant)
                .map_err(|e| invalid(format!("admin.tokens[{i}].tenant"), e.to_string()))?;
            let mut sha256 = [0u8; 32];
            hex::decode_to_slice(t.token_sha256.trim(), &mut sha256).map_err(|_| {
                invalid(
                    format!("admin.tokens[{i}].token_sha256"),
                    "must be 64 hex digits: the SHA-256 of the token (`hookgate token new` prints one)",
                )
            })?;
            tokens.push(AdminToken { tenant, sha256 });
        }
        let admin = AdminConfig {
            tokens,
            idempotency_ttl: duration("admin.idempotency_ttl", &a.idempotency_ttl)?,
            idempotency_stale_after: duration(
                "admin.idempotency_stale_after",
                &a.idempotency_stale_after,
            )?,
            auth_failure_burst: a.auth_failure_burst,
            auth_failure_interval: duration(
                "admin.auth_failure_interval",
                &a.auth_failure_interval,
            )?,
        };
        if admin.auth_failure_burst == 0 {
            return Err(invalid("admin.auth_failure_burst", "must be positive"));
        }
        if admin.auth_failure_interval.is_zero() {
            return Err(invalid("admin.auth_failure_interval", "must be positive"));
        }

        let r = &settings.retention;
        let retention = RetentionConfig {
            events: duration("retention.events", &r.events)?,
            dedupe_window: duration("retention.dedupe_window", &r.dedupe_window)?,
            batch: r.batch,
        };
        if retention.batch <= 0 {
            return Err(invalid("retention.batch", "must be positive"));
        }
        if retention.dedupe_window < MIN_DEDUPE_WINDOW && !r.force_short_dedupe_window {
            return Err(invalid(
                "retention.dedupe_window",
                "is shorter than 3 days, the longest common provider retry window: a retry could be stored twice. Set retention.force_short_dedupe_window = true to accept that",
            ));
        }

        let mut destinations = BTreeMap::new();
        for (i, dest) in settings.destinations.iter().enumerate() {
            let destination = super::destination::destination(i, dest)?;
            if destinations.contains_key(destination.name.as_str()) {
                return Err(invalid(
                    format!("destinations[{i}].name"),
                    format!("{} is defined twice", destination.name),
                ));
            }
            destinations.insert(destination.name.to_string(), Arc::new(destination));
        }

        let mut sources = BTreeMap::new();
        for (i, src) in settings.sources.iter().enumerate() {
            let key = |k: &str| format!("sources[{i}].{k}");
            let name = Name::parse("source name", &src.name)
                .map_err(|e| invalid(key("name"), e.to_string()))?;
            let tenant = Name::parse("tenant", &src.tenant)
                .map_err(|e| invalid(key("tenant"), e.to_string()))?;
            let definition = registry.get(&src.provider).ok_or_else(|| {
                invalid(
                    key("provider"),
                    format!(
                        "names unknown provider {:?}; known: {}",
                        src.provider,
                        registry.names().collect::<Vec<_>>().join(", ")
                    ),
                )
            })?;
            let overrides = SourceOverrides {
                signature_header: src.signature_header.clone(),
                signature_encoding: src.signature_encoding.clone(),
                signature_prefix: src.signature_prefix.clone(),
                event_id: src.event_id.clone(),
                event_type: src.event_type.clone(),
            };
            let reconcile = src
                .reconcile
                .as_ref()
                .map(|r| {
                    super::reconcile::reconcile_config(
                        i,
                        &definition.name,
                        src.event_id.is_some(),
                        r,
                    )
                })
                .transpose()?;
            if reconcile
                .as_ref()
                .is_some_and(|r| r.lookback > retention.dedupe_window)
            {
                // An id forgotten by retention would look missing and be recovered again.
                return Err(invalid(
                    key("reconcile.lookback"),
                    "is longer than retention.dedupe_window: events whose ids were forgotten would be recovered twice",
                ));
            }
            let definition = definition
                .with_overrides(&overrides)
                .map_err(|(k, p)| invalid(key(k), p))?;
            if src.secrets.is_empty() {
                return Err(invalid(
                    key("secrets"),
                    "is empty: a source needs at least one secret",
                ));
            }
            let resolved = src
                .secrets
                .iter()
                .enumerate()
                .map(|(j, s)| {
                    resolve_secret(s).map_err(|p| invalid(format!("sources[{i}].secrets[{j}]"), p))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let plain: Vec<&str> = resolved.iter().map(|s| s.expose_secret()).collect();
            let needs_url = definition.needs_public_url();
            let needs_token = definition.needs_verify_token();
            let mut verifier = SourceVerifier::new(definition, &plain)
                .map_err(|(j, p)| invalid(format!("sources[{i}].secrets[{j}]"), p))?;
            match &src.public_url {
                Some(url) => {
                    verifier = verifier
                        .with_public_url(url)
                        .map_err(|p| invalid(key("public_url"), p))?
                }
                None if needs_url => {
                    return Err(invalid(
                        key("public_url"),
                        format!(
                            "is required: provider {} signs the URL it calls",
                            src.provider
                        ),
                    ))
                }
                None => {}
            }
            match &src.verify_token {
                Some(token) => {
                    let token =
                        resolve_secret(token).map_err(|p| invalid(key("verify_token"), p))?;
                    verifier = verifier.with_verify_token(token.expose_secret());
                }
                None if needs_token => {
                    return Err(invalid(
                        key("verify_token"),
                        format!(
                            "is required: provider {}'s handshake checks one",
                            src.provider
                        ),
                    ))
                }
                None => {}
            }
            if let Some(signing_key) = &src.signing_key {
                let k = resolve_secret(signing_key).map_err(|p| invalid(key("signing_key"), p))?;
                verifier = verifier
                    .with_signing_key(k.expose_secret())
                    .map_err(|p| invalid(key("signing_key"), p))?;
            }
            let routes = super::routes::route_table(i, src, &destinations)?;
            if sources.contains_key(name.as_str()) {
                return Err(invalid(key("name"), format!("{name} is defined twice")));
            }
            let rate_limit = match (src.rate_limit_per_second, src.rate_limit_burst) {
                (None, None) => None,
                (None, Some(_)) => {
                    return Err(invalid(
                        key("rate_limit_burst"),
                        "needs rate_limit_per_second",
                    ))
                }
                (Some(0), _) | (_, Some(0)) => {
                    return Err(invalid(key("rate_limit_per_second"), "must be positive"))
                }
                (Some(rate), burst) => Some((rate, burst.unwrap_or(rate))),
            };
            sources.insert(
                name.to_string(),
                Arc::new(Source {
                    name,
                    tenant,
                    provider: src.provider.clone(),
                    verifier,
                    destinations: routes.destinations(),
                    routes,
                    rate_limit,
                    reconcile,
                }),
            );
        }

        if sources.contains_key(ALERTS_SOURCE) {
            return Err(invalid(
                "sources",
                format!("may not name a source {ALERTS_SOURCE:?}: alerts are stored under it"),
            ));
        }
        let al = &settings.alerts;
        let alerts = match &al.destination {
            None => None,
            Some(d) => {
                let destination = destinations.get(d).map(|d| d.name.clone()).ok_or_else(|| {
                    invalid(
                        "alerts.destination",
                        format!("names unknown destination {d:?}"),
                    )
                })?;
                let tenant = Name::parse("tenant", &al.tenant)
                    .map_err(|e| invalid("alerts.tenant", e.to_string()))?;
                if al.rejections_per_minute == 0 {
                    return Err(invalid("alerts.rejections_per_minute", "must be positive"));
                }
                Some(AlertsConfig {
                    destination,
                    tenant,
                    max_lag: duration("alerts.max_lag", &al.max_lag)?,
                    rejections_per_minute: al.rejections_per_minute,
                })
            }
        };

        let metrics = MetricsConfig {
            listen: settings.metrics.listen.clone(),
            token_sha256: settings
                .metrics
                .token
                .as_ref()
                .map(|t| {
                    let token = resolve_secret(t).map_err(|p| invalid("metrics.token", p))?;
                    Ok::<_, ConfigError>(
                        sha2::Sha256::digest(token.expose_secret().as_bytes()).into(),
                    )
                })
                .transpose()?,
        };

        Ok(Self {
            server,
            database,
            log_format,
            worker,
            admin,
            retention,
            metrics,
            sources,
            destinations,
            alerts,
            quarantine: super::QuarantineConfig::from_settings(&settings.quarantine)?,
        })
    }
}
