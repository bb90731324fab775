//! One job's delivery, from claim to recorded outcome.

use std::sync::Arc;

use chrono::Utc;
use tokio::sync::{Notify, OwnedSemaphorePermit};

use super::crash::{CrashPoint, CrashPoints};
use crate::alerts::Alerts;
use crate::config::{Circuit, GatewayConfig};
use crate::delivery::{Deliverer, Delivery};
use crate::queue::{JobQueue, NextStep, Verdict};
use crate::store::{
    AttemptOutcome, AttemptRecord, CircuitChange, ClaimedJob, GroupCommit, JobOutcome, JobUpdate,
    StoreError,
};
use crate::telemetry::Metrics;

pub(super) struct Context {
    pub worker_id: String,
    pub queue: JobQueue,
    pub alerts: Alerts,
    pub outcomes: GroupCommit<JobOutcome, bool>,
    pub config: Arc<GatewayConfig>,
    pub deliverer: Deliverer,
    pub crash: CrashPoints,
    pub metrics: Arc<Metrics>,
    /// Destinations with ordered jobs, and the claim loop's wake-up once an outcome of one
    /// of theirs is written: the next job of the key may be claimable now, and no new job
    /// (no NOTIFY) may come to say so.
    pub ordered: Arc<std::collections::BTreeSet<String>>,
    pub line_moved: Arc<tokio::sync::Notify>,
    /// Renews the leases of this process's deliveries.
    pub leases: super::leases::LeaseKeeper,
}

/// The first pause before an outcome write is tried again, and the longest.
const OUTCOME_RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(100);
const OUTCOME_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// A delivery's concurrency permits (the process's and its destination's). Dropping them
/// wakes the claim loop, which may have been waiting for room.
pub(super) struct Slots {
    pub permits: Option<[OwnedSemaphorePermit; 2]>,
    pub freed: Arc<Notify>,
}

impl Drop for Slots {
    fn drop(&mut self) {
        // Released before the wake-up, so the woken loop sees the room.
        drop(self.permits.take());
        self.freed.notify_one();
    }
}

impl Context {
    /// Delivers and records the outcome. Returns false when the job was abandoned (a crash
    /// point, or the outcome could not be written): its lease will expire and the reconciler
    /// returns it to the queue.
    /// `slots` (the process's and the destination's concurrency permits) are released as soon
    /// as the destination has answered: they bound requests in flight, and the outcome's
    /// commit, shared with other deliveries, need not hold them.
    pub async fn deliver(&self, job: ClaimedJob, slots: Slots) -> bool {
        if self.crash.hit(CrashPoint::AfterClaim) {
            return false;
        }
        let Some(destination) = self.config.destinations.get(&job.destination).cloned() else {
            let error = Some("destination is no longer configured".to_owned());
            let record = self.record(&job, Utc::now(), 0, None, error, AttemptOutcome::Failed);
            return self.finish(&job, JobUpdate::Failed, record).await;
        };

        // Renewed until the outcome commits, not only while the request is out: a live
        // worker whose outcome write waits (a busy pool, a slow database, the circuit's
        // count first) must not have its job taken and delivered again.
        let _kept = self.leases.keep(&job);
        let event_id = job.event_id.to_string();
        let delivery_id = job.job_id.to_string();
        let report = self
            .deliverer
            .deliver(
                &destination,
                &Delivery {
                    event_id: &event_id,
                    delivery_id: &delivery_id,
                    destination: &job.destination,
                    source: &job.source,
                    event_type: job.event_type.as_deref(),
                    provider_event_id: &job.provider_event_id,
                    content_type: job.content_type.as_deref(),
                    body: &job.body,
                    attempt: job.attempt,
                },
            )
            .await;
        drop(slots);
        if self.crash.hit(CrashPoint::AfterSend) {
            return false;
        }

        let step =
            destination
                .retry_policy
                .next_step(job.attempt, &report.verdict, fastrand::f64());
        let now = Utc::now();
        let (update, outcome) = match step {
            NextStep::Succeed => (JobUpdate::Succeeded, AttemptOutcome::Succeeded),
            NextStep::Fail => (JobUpdate::Failed, AttemptOutcome::Failed),
            NextStep::RetryAfter(delay) => (
                JobUpdate::Retry {
                    next_attempt_at: now
                        + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::days(1)),
                },
                AttemptOutcome::Retry,
            ),
        };
        let error = match (&report.verdict, report.error) {
            (Verdict::Delivered, _) => None,
            (_, Some(e)) => Some(e),
            (_, None) => Some("delivery failed".to_owned()),
        };
        tracing::info!(
            event_id = %job.event_id,
            source = %job.source,
            destination = %job.destination,
            attempt = job.attempt,
            status = report.status_code,
            outcome = outcome.as_str(),
            // The status or the transport error's kind and text; never the response body.
            reason = error.as_deref(),
            "delivery attempt"
        );
        self.metrics
            .delivery_attempts
            .with_label_values(&[&job.destination, outcome.as_str()])
            .inc();
        self.metrics
            .delivery_duration
            .with_label_values(&[&job.destination])
            .observe(report.duration.as_secs_f64());
        if let Some(circuit) = destination.circuit {
            let succeeded = matches!(report.verdict, Verdict::Delivered);
            self.count_toward_circuit(&job.destination, succeeded, circuit, now)
                .await;
        }
        if self.crash.hit(CrashPoint::BeforeOutcome) {
            return false;
        }
        self.crash.pass(CrashPoint::BeforeOutcome).await;
        let record = self.record(
            &job,
            report.started_at,
            i64::try_from(report.duration.as_millis()).unwrap_or(i64::MAX),
            report.status_code.map(i32::from),
            error,
            outcome,
        );
        let finished = self.finish(&job, update, record).await;
        if self.ordered.contains(&job.destination) {
            self.line_moved.notify_one();
        }
        finished
    }

    /// Counts the attempt toward the destination's circuit breaker. A failure to record it
    /// is logged, never the job's failure: the breaker is a brake, and the next attempt
    /// counts again.
    async fn count_toward_circuit(
        &self,
        destination: &str,
        succeeded: bool,
        circuit: Circuit,
        now: chrono::DateTime<Utc>,
    ) {
        let cool_down =
            chrono::Duration::from_std(circuit.cool_down).unwrap_or(chrono::Duration::minutes(1));
        match self
            .queue
            .count_toward_circuit(destination, succeeded, circuit.failures, cool_down, now)
            .await
        {
            Ok(Some(CircuitChange::Tripped)) => {
                tracing::warn!(
                    destination,
                    failures = circuit.failures,
                    "destination tripped: its jobs are held, and one is tried after each cool-down"
                );
                if let Err(e) = self
                    .alerts
                    .destination_tripped(destination, circuit.failures, now)
                    .await
                {
                    tracing::warn!(error = %e, "could not store the destination.tripped alert");
                }
            }
            Ok(Some(CircuitChange::Recovered)) => {
                tracing::info!(destination, "destination recovered: its held jobs go out");
                if let Err(e) = self.alerts.destination_recovered(destination, now).await {
                    tracing::warn!(error = %e, "could not store the destination.recovered alert");
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(destination, error = %e, "could not count the attempt toward the circuit breaker")
            }
        }
    }

    fn record(
        &self,
        job: &ClaimedJob,
        started_at: chrono::DateTime<Utc>,
        duration_ms: i64,
        status_code: Option<i32>,
        error: Option<String>,
        outcome: AttemptOutcome,
    ) -> AttemptRecord {
        AttemptRecord {
            attempt: job.attempt,
            worker_id: self.worker_id.clone(),
            started_at,
            duration_ms,
            status_code,
            error,
            outcome,
        }
    }

    /// Writes the outcome. The destination has answered, so giving up on the write means
    /// delivering the job again: a failure a retry may get past (a cut connection, a
    /// restarting database, SQLite's write lock held elsewhere) is tried again, with a
    /// growing pause, for up to a lease; the lease is renewed meanwhile, and every write is
    /// fenced by the claim token. A write that did commit but whose answer was lost leaves
    /// the retry finding the claim gone: it records a `lease_lost` attempt beside the real
    /// outcome, and the job keeps the real one.
    async fn finish(&self, job: &ClaimedJob, update: JobUpdate, record: AttemptRecord) -> bool {
        let outcome = JobOutcome {
            job: job.job_id,
            claim_token: job.claim_token,
            update,
            record,
            now: Utc::now(),
        };
        let give_up_at = tokio::time::Instant::now() + self.config.worker.lease;
        let mut pause = OUTCOME_RETRY_FIRST;
        loop {
            match self.outcomes.submit(outcome.clone()).await {
                Ok(true) => return true,
                Ok(false) => {
                    tracing::warn!(job_id = %job.job_id, "lease lost before the outcome was recorded; a newer claim owns the job");
                    return true;
                }
                Err(e)
                    if matches!(*e, StoreError::Unavailable(_))
                        && tokio::time::Instant::now() + pause < give_up_at =>
                {
                    tracing::warn!(job_id = %job.job_id, error = %e, "could not record the outcome; trying again");
                    self.crash.pass(CrashPoint::OutcomeRetry).await;
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(OUTCOME_RETRY_MAX);
                }
                Err(e) => {
                    tracing::warn!(job_id = %job.job_id, error = %e, "could not record the outcome; the lease will expire and the job be retried");
                    return false;
                }
            }
        }
    }
}
