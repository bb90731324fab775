//! The reconciler: returns expired leases to the queue and creates jobs a source routes to
//! but an event lacks. Safe to run in every process: every write is fenced by the claim
//! token, and on PostgreSQL an advisory lock lets one process sweep at a time.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

use super::crash::{CrashPoint, CrashPoints};
use crate::alerts::Alerts;
use crate::config::GatewayConfig;
use crate::queue::JobQueue;
use crate::store::{ArrivalCursor, MissingJob, Store, StoreError};
use crate::telemetry::Metrics;

const BATCH: i64 = 500;

/// Events one step of the missing-jobs sweep reads: a few milliseconds of work, so no
/// statement of the sweep holds a snapshot for long (see `Store::create_missing_jobs`).
const MISSING_JOBS_STEP: i64 = 5_000;

/// How long after its `received_at` an event may still commit (a request's batch waiting on a
/// busy store). Sweeps after the first look back to the previous sweep less this, not the
/// whole `worker.reconcile_lookback`, so a sweep reads minutes of events, not a day of them.
const LATE_COMMIT_MARGIN: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

/// How often, at most, a reconciler looks for missing jobs after its first sweep: each look
/// reads this plus `LATE_COMMIT_MARGIN` of events, twice what arrived since the last one.
const MISSING_JOBS_INTERVAL: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Another process holds the sweep lock; nothing was done.
    pub skipped: bool,
    pub expired_leases: u64,
    pub missing_jobs: u64,
    /// Idempotency-Key records past `admin.idempotency_ttl`, removed.
    pub expired_idempotency_keys: u64,
    /// Console sessions past their absolute or idle limit, removed.
    pub expired_sessions: u64,
    /// Events past retention, deleted with their history.
    pub expired_events: u64,
    /// Events past content retention whose ids are still kept for dedupe: content removed
    /// (SQLite).
    pub purged_events: u64,
    /// Dedupe keys past the longer of retention.events and retention.dedupe_window, removed
    /// (PostgreSQL).
    pub forgotten_keys: u64,
    /// Time partitions dropped by retention (PostgreSQL).
    pub dropped_partitions: u64,
    /// Expired time partitions kept because a job in them is still unfinished (PostgreSQL).
    pub held_partitions: u64,
    /// Quarantined requests past `quarantine.retention`, removed.
    pub expired_quarantine: u64,
}

#[derive(Debug, Clone)]
pub struct Reconciler {
    store: Store,
    queue: JobQueue,
    config: Arc<GatewayConfig>,
    crash: CrashPoints,
    metrics: Arc<Metrics>,
    /// When this reconciler last finished looking for missing jobs.
    missing_jobs_swept_at: Arc<Mutex<Option<DateTime<Utc>>>>,
    /// Events read per step of the missing-jobs sweep.
    scan_step: i64,
    alerts: Alerts,
    /// The first minute whose dead letters have not been looked at for alerts.
    alerted_minute: Arc<Mutex<Option<i64>>>,
}

impl Reconciler {
    pub fn new(store: Store, config: Arc<GatewayConfig>) -> Self {
        Self {
            queue: JobQueue::new(store.clone()),
            alerts: Alerts::new(store.clone(), config.clone()),
            alerted_minute: Arc::default(),
            store,
            config,
            crash: CrashPoints::default(),
            metrics: Arc::default(),
            missing_jobs_swept_at: Arc::default(),
            scan_step: MISSING_JOBS_STEP,
        }
    }

    /// Reads at most `events` events per step of the missing-jobs sweep (tests use a few).
    pub fn with_missing_jobs_step(mut self, events: i64) -> Self {
        self.scan_step = events.max(1);
        self
    }

    /// Counts repairs into these metrics.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn crash_points(&self) -> &CrashPoints {
        &self.crash
    }

    pub async fn sweep(&self) -> Result<ReconcileReport, StoreError> {
        self.sweep_at(Utc::now()).await
    }

    pub async fn sweep_at(&self, now: DateTime<Utc>) -> Result<ReconcileReport, StoreError> {
        let Some(lock) = self.store.try_reconcile_lock().await? else {
            return Ok(ReconcileReport {
                skipped: true,
                ..Default::default()
            });
        };
        let result = self.sweep_locked(now).await;
        lock.release().await;
        let report = result?;
        let repairs = &self.metrics.reconciler_repairs;
        repairs
            .with_label_values(&["expired_lease"])
            .inc_by(report.expired_leases);
        repairs
            .with_label_values(&["missing_job"])
            .inc_by(report.missing_jobs);
        if report.expired_leases > 0 || report.missing_jobs > 0 {
            tracing::info!(
                expired_leases = report.expired_leases,
                missing_jobs = report.missing_jobs,
                expired_idempotency_keys = report.expired_idempotency_keys,
                "reconciler repaired jobs"
            );
        }
        Ok(report)
    }

    async fn sweep_locked(&self, now: DateTime<Utc>) -> Result<ReconcileReport, StoreError> {
        let mut report = ReconcileReport::default();
        loop {
            let expired = self.queue.expired(now, BATCH).await?;
            let full = expired.len() as i64 == BATCH;
            for lease in expired {
                let policy = self
                    .config
                    .destinations
                    .get(&lease.destination)
                    .map(|d| &d.retry_policy);
                if self.queue.expire(&lease, policy, now).await? {
                    report.expired_leases += 1;
                }
                if self.crash.hit(CrashPoint::ReconcileAfterRepair) {
                    return Ok(report);
                }
            }
            if !full {
                break;
            }
        }

        self.sweep_missing_jobs(now, &mut report).await?;

        // The console charts each destination's lag from these samples, one per minute.
        let destinations: Vec<&str> = self
            .config
            .destinations
            .keys()
            .map(String::as_str)
            .collect();
        let ages = self
            .store
            .sample_destination_lag(&destinations, now)
            .await?;
        self.alerts.lagging(&ages, now).await?;
        let from = self
            .alerted_minute
            .lock()
            .expect("alert mark")
            .unwrap_or(i64::MIN);
        let next = self.alerts.dead_letters(from, now).await?;
        *self.alerted_minute.lock().expect("alert mark") = Some(next);

        let ttl = chrono::Duration::from_std(self.config.admin.idempotency_ttl)
            .unwrap_or(chrono::Duration::days(1));
        loop {
            let removed = self.store.sweep_idempotency(now - ttl, BATCH).await?;
            report.expired_idempotency_keys += removed;
            if removed < BATCH as u64 {
                break;
            }
        }
        // Console sessions past their limits (a login's row is otherwise kept until the same
        // browser comes back, which it may never do).
        let (secs, idle) = (now.timestamp(), crate::console::SESSION_IDLE_SECONDS);
        loop {
            let removed = self.store.sweep_sessions(secs, secs - idle, BATCH).await?;
            report.expired_sessions += removed;
            if removed < BATCH as u64 {
                break;
            }
        }
        self.sweep_retention(now, &mut report).await?;
        Ok(report)
    }

    /// Routes again the events another configuration routed, and creates the jobs they
    /// lack (see `Store::reroute_scan`). The first sweep of a process reads back
    /// `worker.reconcile_lookback`; later ones run at most every `MISSING_JOBS_INTERVAL` and
    /// read back to the previous one less `LATE_COMMIT_MARGIN`. Events lack jobs only when
    /// routes changed (another process ingested with an older configuration), so reading
    /// ten minutes of events at every sweep (each `worker.reconcile_interval`, 30 s by
    /// default) read 21 times what had arrived since the previous one, to find nothing.
    async fn sweep_missing_jobs(
        &self,
        now: DateTime<Utc>,
        report: &mut ReconcileReport,
    ) -> Result<(), StoreError> {
        let lookback_start = now
            - chrono::Duration::from_std(self.config.worker.reconcile_lookback)
                .unwrap_or(chrono::Duration::days(1));
        let previous = *self.missing_jobs_swept_at.lock().expect("sweep mark");
        let since = match previous {
            Some(at) if now - at < MISSING_JOBS_INTERVAL => return Ok(()),
            Some(at) => lookback_start.max(at - LATE_COMMIT_MARGIN),
            None => lookback_start,
        };
        for source in self.config.sources.values() {
            let digest = source.routes.digest();
            let mut after = Some(ArrivalCursor::starting_at(since));
            while let Some(cursor) = after {
                let scan = self
                    .store
                    .reroute_scan(source.name.as_str(), digest, cursor, self.scan_step)
                    .await?;
                let mut jobs = Vec::new();
                for event in &scan.stale {
                    for routed in source.routes.select_stored(event) {
                        let delay = chrono::Duration::from_std(routed.delay).unwrap_or_default();
                        jobs.push(MissingJob {
                            event: event.id,
                            destination: routed.destination.to_string(),
                            due: event.received_at + delay,
                            ordering: routed.ordering,
                        });
                    }
                }
                let rerouted: Vec<_> = scan.stale.iter().map(|e| e.id).collect();
                report.missing_jobs += self
                    .store
                    .create_missing_jobs(&rerouted, digest, &jobs, now)
                    .await?;
                after = scan.next;
            }
        }
        *self.missing_jobs_swept_at.lock().expect("sweep mark") = Some(now);
        Ok(())
    }

    /// Retention: content goes after `retention.events`; the dedupe key after the longer of
    /// that and `retention.dedupe_window` (`Store::sweep_retention`).
    async fn sweep_retention(
        &self,
        now: DateTime<Utc>,
        report: &mut ReconcileReport,
    ) -> Result<(), StoreError> {
        let r = &self.config.retention;
        let age = |d: std::time::Duration| {
            chrono::Duration::from_std(d)
                .ok()
                .and_then(|d| now.checked_sub_signed(d))
                .unwrap_or(DateTime::<Utc>::MIN_UTC)
        };
        let swept = self
            .store
            .sweep_retention(
                age(r.events),
                age(r.events.max(r.dedupe_window)),
                now,
                r.batch,
            )
            .await?;
        report.expired_events += swept.expired_events;
        report.purged_events += swept.purged_events;
        report.forgotten_keys += swept.forgotten_keys;
        report.dropped_partitions += swept.dropped_partitions;
        report.held_partitions += swept.held_partitions;
        let quarantined_before = age(self.config.quarantine.retention);
        loop {
            let n = self
                .store
                .sweep_quarantine(quarantined_before, r.batch)
                .await?;
            report.expired_quarantine += n;
            if n < r.batch as u64 {
                break;
            }
        }
        Ok(())
    }
}
