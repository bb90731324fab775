//! `JobQueue`: claim, renew, finish, hand back and expire jobs. Every change of a claimed
//! job is fenced by its claim token: it applies only while that claim still holds the job.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::RetryPolicy;
use crate::config::RateLimit;
use crate::domain::JobId;
use crate::store::{
    AttemptOutcome, AttemptRecord, CircuitChange, ClaimedJob, ExpiredLease, Hold, JobOutcome,
    JobUpdate, JobWaker, Store, StoreError,
};

/// The queue over a store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct JobQueue {
    store: Store,
}

/// `worker.lease` as the store's clocks take it; 30 s should it be out of chrono's range.
pub fn lease_span(lease: Duration) -> chrono::Duration {
    chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::seconds(30))
}

impl JobQueue {
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// Claims up to `limit` jobs of `destination` due by `now`, leased until `lease_until`
    /// (`Store::claim_jobs`).
    pub async fn claim(
        &self,
        destination: &str,
        limit: i64,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<ClaimedJob>, StoreError> {
        self.store
            .claim_jobs(destination, limit, now, lease_until)
            .await
    }

    /// The destinations whose jobs are held (paused, or tripped by a circuit breaker): not
    /// claimed but for a tripped one's probe, and not handed off.
    pub async fn holds(&self) -> Result<Vec<Hold>, StoreError> {
        self.store.destination_holds().await
    }

    /// Counts an attempt toward a destination's circuit breaker
    /// (`Store::record_circuit_attempt`).
    pub async fn count_toward_circuit(
        &self,
        destination: &str,
        succeeded: bool,
        failures: u32,
        cool_down: chrono::Duration,
        now: DateTime<Utc>,
    ) -> Result<Option<CircuitChange>, StoreError> {
        self.store
            .record_circuit_attempt(destination, succeeded, failures, cool_down, now)
            .await
    }

    /// Up to `want` deliveries' worth of the destination's rate limit, shared by every
    /// process on the database; with none, when the next is due (`Store::take_tokens`).
    pub async fn take_tokens(
        &self,
        destination: &str,
        want: usize,
        rate: RateLimit,
        now: DateTime<Utc>,
    ) -> Result<(usize, Option<DateTime<Utc>>), StoreError> {
        let (taken, next) = self
            .store
            .take_tokens(destination, want as i64, rate.per_second, rate.burst, now)
            .await?;
        Ok((taken.max(0) as usize, next))
    }

    /// Puts back tokens that found no due job.
    pub async fn give_back_tokens(
        &self,
        destination: &str,
        unused: usize,
        rate: RateLimit,
    ) -> Result<(), StoreError> {
        self.store
            .give_back_tokens(destination, unused as i64, rate.burst)
            .await
    }

    /// A tripped destination's probe, if it is due and no one (in any process) took it.
    pub async fn take_probe(
        &self,
        destination: &str,
        now: DateTime<Utc>,
        cool_down: Duration,
    ) -> Result<bool, StoreError> {
        let next =
            now + chrono::Duration::from_std(cool_down).unwrap_or(chrono::Duration::minutes(1));
        self.store.take_probe(destination, now, next).await
    }

    /// Records the outcomes of many attempts in one transaction; whether each claim still
    /// held its job, in order (`Store::finish_jobs`).
    pub async fn finish(&self, outcomes: &[JobOutcome]) -> Result<Vec<bool>, StoreError> {
        self.store.finish_jobs(outcomes).await
    }

    /// Extends a claim's lease; false once the claim is lost.
    pub async fn renew(
        &self,
        job: JobId,
        claim_token: Uuid,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.store.renew_lease(job, claim_token, until).await
    }

    /// Extends many claims' leases at once; returns the jobs whose claims still held.
    pub async fn renew_all(
        &self,
        leases: &[(JobId, Uuid)],
        until: DateTime<Utc>,
    ) -> Result<Vec<JobId>, StoreError> {
        self.store.renew_leases(leases, until).await
    }

    /// Returns a claimed job to the queue, due now, recording its attempt as `released`
    /// (a worker that stops before the attempt ends). False if the claim was already lost.
    pub async fn hand_back(
        &self,
        job: JobId,
        claim_token: Uuid,
        attempt: i32,
        worker_id: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let record = AttemptRecord {
            attempt,
            worker_id: worker_id.to_owned(),
            started_at: now,
            duration_ms: 0,
            status_code: None,
            error: Some("worker shut down before the attempt finished".into()),
            outcome: AttemptOutcome::Released,
        };
        let update = JobUpdate::Retry {
            next_attempt_at: now,
        };
        self.store
            .finish_job(job, claim_token, update, &record, now)
            .await
    }

    /// Up to `limit` claimed jobs whose lease ran out before `now`.
    pub async fn expired(
        &self,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<ExpiredLease>, StoreError> {
        self.store.expired_leases(now, limit).await
    }

    /// Ends an expired lease: the job is due again, or failed if that was its last attempt
    /// under `policy` (`None`: its destination is no longer configured). The lost attempt
    /// counts, so a job whose every attempt crashes its worker still ends as a dead letter
    /// instead of looping forever. False if the claim was no longer the job's.
    pub async fn expire(
        &self,
        lease: &ExpiredLease,
        policy: Option<&RetryPolicy>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let (update, error) = match policy {
            Some(p) if lease.attempts < p.max_attempts() => (
                JobUpdate::Retry {
                    next_attempt_at: now,
                },
                "lease expired: the worker stopped before reporting",
            ),
            Some(_) => (
                JobUpdate::Failed,
                "lease expired on the last attempt: retries exhausted",
            ),
            None => (JobUpdate::Failed, "destination is no longer configured"),
        };
        let record = AttemptRecord {
            attempt: lease.attempts,
            worker_id: "reconciler".into(),
            started_at: now,
            duration_ms: 0,
            status_code: None,
            error: Some(error.into()),
            outcome: AttemptOutcome::LeaseExpired,
        };
        self.store
            .finish_job(lease.job_id, lease.claim_token, update, &record, now)
            .await
    }

    /// Something to wait on for new jobs (`JobWaker::wait`).
    pub async fn waker(&self) -> Result<JobWaker, StoreError> {
        self.store.job_waker().await
    }
}
