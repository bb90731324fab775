//! Reconciliation against the provider's API (docs/RECOVERY.md): a run lists what the
//! provider sent over a window, pages at a time, and recovers each event whose id is not
//! stored for the source: Stripe's events are ingested from the API's JSON through the same
//! `ingest` path as webhooks (dedupe, routing, group commit); GitHub and Paddle are asked to
//! send theirs again, signed. One run at a time per source over every process (a lease in
//! the database); an interrupted run leaves a cursor the next one goes on from; a provider's
//! rate limit ends the run and holds off the next until the time it gave.

mod client;
mod github;
mod paddle;
mod stripe;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use reqwest::Method;
use tokio::sync::watch;
use uuid::Uuid;

use crate::config::{GatewayConfig, ReconcileConfig, ReconcileProvider, Source};
use crate::domain::ProviderEventId;
use crate::ingest::{ingest, IngestBatcher, IngestOutcome};
use crate::store::{ReconciliationEnd, ReconciliationRun, Store, StoreError};
use crate::telemetry::Metrics;
use client::{ApiClient, ApiError};

/// How long one run may go on making calls; it then stops where it is, cursor kept.
const RUN_DEADLINE: Duration = Duration::from_secs(5 * 60);

/// A run's lease is renewed before each page and each recovery, each time for two calls'
/// timeouts and this margin: a run cut off mid-way (its process killed, its database
/// restarted) blocks the source's next run for under a minute, not for the run's deadline.
const LEASE_MARGIN: Duration = Duration::from_secs(30);

/// The lease a run holds, and how far each renewal extends it.
struct Lease<'a> {
    store: &'a Store,
    source: &'a str,
    token: Uuid,
    span: chrono::TimeDelta,
}

impl Lease<'_> {
    /// Extends the lease from now; `false` when another run holds it now (this one stops).
    async fn keep(&self) -> Result<bool, StoreError> {
        let until = millis(Utc::now()) + self.span;
        self.store
            .renew_reconciliation(self.source, self.token, until)
            .await
    }
}

/// One event the provider listed, and how it is recovered if missing.
#[derive(Debug)]
pub(crate) struct Listed {
    /// The id hookgate dedupes on for the source (`evt_...`, a delivery GUID).
    pub provider_event_id: String,
    pub recovery: Recovery,
}

#[derive(Debug)]
pub(crate) enum Recovery {
    /// Ingest this body, read from the API, as the event.
    Ingest {
        scheme: &'static str,
        event_type: Option<String>,
        body: Bytes,
    },
    /// Ask the provider to send it again: POST to this path.
    Request { path: String },
}

/// One page of the provider's list; `next` is its cursor for the page after (none at the end).
#[derive(Debug)]
pub(crate) struct Page {
    pub items: Vec<Listed>,
    pub next: Option<String>,
}

/// Who started a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunBy {
    Schedule,
    Admin,
}

impl RunBy {
    fn as_str(self) -> &'static str {
        match self {
            Self::Schedule => "schedule",
            Self::Admin => "admin",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("source {0} has no [sources.reconcile]")]
    NotConfigured(String),
    #[error("a reconciliation of source {0} is running")]
    Busy(String),
    #[error("the provider asked for no calls before {0}")]
    WaitUntil(DateTime<Utc>),
    #[error(
        "since must be within the source's lookback (not before {floor}) and not in the future"
    )]
    SinceOutOfRange { floor: DateTime<Utc> },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Runs reconciliations: on demand (the admin API) and on each source's `interval`.
#[derive(Clone)]
pub struct ProviderReconciler {
    store: Store,
    config: Arc<GatewayConfig>,
    batcher: IngestBatcher,
    metrics: Arc<Metrics>,
    client: ApiClient,
}

impl std::fmt::Debug for ProviderReconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProviderReconciler")
    }
}

/// What a run counted so far.
#[derive(Debug, Default)]
struct Tally {
    pages: i64,
    listed: i64,
    missing: i64,
    recovered: i64,
    errors: i64,
    last_error: Option<String>,
    not_before: Option<DateTime<Utc>>,
    /// Ids already looked at: a provider may list one event more than once (GitHub lists
    /// each redelivery), and it is recovered once.
    seen: HashSet<String>,
}

impl Tally {
    fn error(&mut self, source: &str, e: &dyn std::fmt::Display) {
        tracing::warn!(source, error = %e, "reconciliation call failed");
        self.errors += 1;
        self.last_error = Some(e.to_string());
    }
}

impl ProviderReconciler {
    pub fn new(
        store: Store,
        config: Arc<GatewayConfig>,
        batcher: IngestBatcher,
        metrics: Arc<Metrics>,
    ) -> Self {
        for (name, _) in config.sources.iter().filter(|(_, s)| s.reconcile.is_some()) {
            for kind in ["listed", "missing", "recovered", "errors"] {
                metrics.reconciliation.with_label_values(&[name, kind]);
            }
        }
        Self {
            store,
            config,
            batcher,
            metrics,
            client: ApiClient::new(),
        }
    }

    /// Runs one reconciliation of `source` now and returns its record. `since` starts a new
    /// pass from that time (within the lookback); without it a run goes on from the cursor an
    /// earlier run left, or starts a pass over the whole lookback.
    #[tracing::instrument(name = "reconcile", skip_all, fields(source = %source.name))]
    pub async fn run(
        &self,
        source: &Arc<Source>,
        run_by: RunBy,
        since: Option<DateTime<Utc>>,
    ) -> Result<ReconciliationRun, RunError> {
        let name = source.name.as_str();
        let config = source
            .reconcile
            .as_ref()
            .ok_or_else(|| RunError::NotConfigured(name.to_owned()))?;
        let started_at = millis(Utc::now());
        let floor = millis(started_at - lookback(config));
        let since = since.map(millis);
        if since.is_some_and(|s| s < floor || s > started_at) {
            return Err(RunError::SinceOutOfRange { floor });
        }
        let token = Uuid::now_v7();
        let span =
            chrono::TimeDelta::from_std(config.timeout * 2 + LEASE_MARGIN).unwrap_or_default();
        let lease_until = started_at + span;
        let Some(state) = self
            .store
            .claim_reconciliation(
                name,
                token,
                started_at,
                lease_until,
                run_by == RunBy::Schedule,
            )
            .await?
        else {
            return Err(RunError::Busy(name.to_owned()));
        };
        if let Some(wait) = state.not_before.filter(|t| *t > started_at) {
            self.store.release_reconciliation(name, token).await?;
            return Err(RunError::WaitUntil(wait));
        }
        let (window_since, mut cursor) = match (since, state.cursor) {
            (Some(s), _) => (s, None),
            (None, Some((c, s))) => (s, Some(c)),
            (None, None) => (floor, None),
        };

        let lease = Lease {
            store: &self.store,
            source: name,
            token,
            span,
        };
        let mut tally = Tally::default();
        let deadline = Instant::now() + RUN_DEADLINE;
        while tally.pages < i64::from(config.max_pages) && Instant::now() < deadline {
            match lease.keep().await {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    tally.error(name, &e);
                    break;
                }
            }
            let page = match self.page(config, window_since, cursor.as_deref()).await {
                Ok(page) => page,
                Err(e) => {
                    if let ApiError::RateLimited { until, .. } = &e {
                        tally.not_before = Some(*until);
                    }
                    tally.error(name, &e);
                    break;
                }
            };
            tally.pages += 1;
            match self
                .recover_page(source, config, page.items, (deadline, &lease), &mut tally)
                .await
            {
                Ok(true) => {}
                // Stopped mid-page: the cursor stays on this page, listed again next run.
                Ok(false) => break,
                Err(e) => {
                    tally.error(name, &e);
                    break;
                }
            }
            cursor = page.next;
            if cursor.is_none() {
                break;
            }
        }

        let finished_at = millis(Utc::now());
        let run = ReconciliationRun {
            id: Uuid::now_v7(),
            tenant: source.tenant.to_string(),
            source: name.to_owned(),
            provider: config.provider.name().to_owned(),
            run_by: run_by.as_str().to_owned(),
            started_at,
            finished_at,
            since: window_since,
            until: started_at,
            pages: tally.pages,
            listed: tally.listed,
            missing: tally.missing,
            recovered: tally.recovered,
            errors: tally.errors,
            last_error: tally.last_error.clone(),
            cursor: cursor.clone(),
        };
        let interval = chrono::TimeDelta::from_std(config.interval).unwrap_or_default();
        let end = ReconciliationEnd {
            cursor: cursor.map(|c| (c, window_since)),
            not_before: tally.not_before,
            next_due_at: finished_at + interval,
        };
        self.store.finish_reconciliation(&run, token, &end).await?;
        for (kind, n) in [
            ("listed", run.listed),
            ("missing", run.missing),
            ("recovered", run.recovered),
            ("errors", run.errors),
        ] {
            self.metrics
                .reconciliation
                .with_label_values(&[name, kind])
                .inc_by(n.unsigned_abs());
        }
        tracing::info!(
            source = name,
            listed = run.listed,
            missing = run.missing,
            recovered = run.recovered,
            errors = run.errors,
            complete = run.cursor.is_none(),
            "reconciliation run finished"
        );
        Ok(run)
    }

    async fn page(
        &self,
        config: &ReconcileConfig,
        since: DateTime<Utc>,
        cursor: Option<&str>,
    ) -> Result<Page, ApiError> {
        match &config.provider {
            ReconcileProvider::Stripe => stripe::page(&self.client, config, since, cursor).await,
            ReconcileProvider::GitHub { hook_path } => {
                github::page(&self.client, config, hook_path, since, cursor).await
            }
            ReconcileProvider::Paddle {
                notification_setting_id,
            } => {
                let setting = notification_setting_id.as_deref();
                paddle::page(&self.client, config, setting, since, cursor).await
            }
        }
    }

    /// Recovers the page's events that are not stored. `false` when a rate limit or the run's
    /// deadline stopped it part-way (the rest waits for the next run).
    async fn recover_page(
        &self,
        source: &Arc<Source>,
        config: &ReconcileConfig,
        items: Vec<Listed>,
        (deadline, lease): (Instant, &Lease<'_>),
        tally: &mut Tally,
    ) -> Result<bool, StoreError> {
        let name = source.name.as_str();
        tally.listed += items.len() as i64;
        let ids: Vec<String> = items.iter().map(|l| l.provider_event_id.clone()).collect();
        let stored = self.store.stored_provider_event_ids(name, &ids).await?;
        for item in items {
            if stored.contains(&item.provider_event_id)
                || !tally.seen.insert(item.provider_event_id.clone())
            {
                continue;
            }
            if Instant::now() >= deadline || !lease.keep().await? {
                return Ok(false);
            }
            tally.missing += 1;
            match self.recover(source, config, item).await {
                Ok(true) => tally.recovered += 1,
                Ok(false) => {}
                Err(Failure::Api(e)) => {
                    let limited = matches!(e, ApiError::RateLimited { .. });
                    if let ApiError::RateLimited { until, .. } = &e {
                        tally.not_before = Some(*until);
                    }
                    tally.error(name, &e);
                    if limited {
                        return Ok(false);
                    }
                }
                Err(Failure::Other(e)) => tally.error(name, &e),
            }
        }
        Ok(true)
    }

    /// Recovers one event; `false` when it turned out stored meanwhile (its webhook came).
    async fn recover(
        &self,
        source: &Arc<Source>,
        config: &ReconcileConfig,
        item: Listed,
    ) -> Result<bool, Failure> {
        match item.recovery {
            Recovery::Ingest {
                scheme,
                event_type,
                body,
            } => {
                let id = ProviderEventId::parse(&item.provider_event_id)
                    .map_err(|e| Failure::Other(format!("event id: {e}")))?;
                let event = crate::verify::provider_api::fetched_from_provider_api(
                    scheme, id, event_type, body,
                );
                match ingest(&self.batcher, source, event, Utc::now()).await {
                    Ok(IngestOutcome::Accepted(_)) => Ok(true),
                    Ok(IngestOutcome::Duplicate(_)) => Ok(false),
                    Err(e) => Err(Failure::Other(e.to_string())),
                }
            }
            Recovery::Request { path } => self
                .client
                .call(config, Method::POST, &path)
                .await
                .map(|_| true)
                .map_err(Failure::Api),
        }
    }

    /// Runs each reconciled source whose run is due, every few seconds, until `shutdown`.
    /// Every process with background work runs this; the lease and the due time in the
    /// database make each source run once per interval over all of them.
    pub async fn run_on_schedule(self, mut shutdown: watch::Receiver<bool>) {
        let sources: Vec<Arc<Source>> = self
            .config
            .sources
            .values()
            .filter(|s| s.reconcile.is_some())
            .cloned()
            .collect();
        let Some(shortest) = sources
            .iter()
            .filter_map(|s| s.reconcile.as_ref().map(|r| r.interval))
            .min()
        else {
            return;
        };
        let tick = (shortest / 4).clamp(Duration::from_secs(1), Duration::from_secs(30));
        loop {
            let round = async {
                for source in &sources {
                    match self.run(source, RunBy::Schedule, None).await {
                        Ok(_) | Err(RunError::Busy(_)) | Err(RunError::WaitUntil(_)) => {}
                        Err(e) => {
                            tracing::warn!(source = %source.name, error = %e, "reconciliation failed")
                        }
                    }
                }
            };
            tokio::select! {
                _ = round => {}
                _ = shutdown.changed() => return,
            }
            tokio::select! {
                _ = tokio::time::sleep(tick) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}

#[derive(Debug)]
enum Failure {
    Api(ApiError),
    Other(String),
}

/// `t` to the millisecond, as both stores keep it, so a run's record reads back as it was.
fn millis(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}

fn lookback(config: &ReconcileConfig) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(config.lookback).unwrap_or(chrono::TimeDelta::days(3))
}

/// `value` percent-encoded for a query string or a path segment.
pub(crate) fn query_value(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}
