//! The job queue's statements (`crate::queue::JobQueue` is their one user besides tests):
//! claim, finish, renew, expire, and the wake-up for new jobs. Claiming and finishing are
//! per backend (`postgres::queue`, `sqlite::queue`): PostgreSQL claims with `SKIP LOCKED`
//! and records a batch of outcomes in one statement over arrays; SQLite does both under its
//! one write lock, a row at a time.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use uuid::Uuid;

use super::codec::{At, Id};
use super::rows::LeaseRow;
use super::{AttemptRecord, ClaimedJob, ExpiredLease, JobOutcome, JobUpdate, Store, StoreError};
use crate::domain::JobId;

impl Store {
    /// Claims up to `limit` due jobs of one destination: each becomes `in_progress` until
    /// `lease_until` under a fresh claim token, and its attempt count goes up by one. Commits
    /// before returning, so no lock is held while the caller delivers.
    pub async fn claim_jobs(
        &self,
        destination: &str,
        limit: i64,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<ClaimedJob>, StoreError> {
        dispatch!(self, s => s.claim_jobs(destination, limit, now, lease_until).await)
    }

    /// Records the attempt and, only if `claim_token` still holds the job, applies `update`.
    /// Returns whether the update applied: `false` means the lease was lost and a newer
    /// claim owns the job; the attempt is then recorded as `lease_lost`.
    pub async fn finish_job(
        &self,
        job: JobId,
        claim_token: Uuid,
        update: JobUpdate,
        record: &AttemptRecord,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let outcome = JobOutcome {
            job,
            claim_token,
            update,
            record: record.clone(),
            now,
        };
        let applied = self.finish_jobs(std::slice::from_ref(&outcome)).await?;
        Ok(applied.first().copied().unwrap_or(false))
    }

    /// `finish_job` for many jobs in one transaction; whether each update applied, in order.
    pub async fn finish_jobs(&self, outcomes: &[JobOutcome]) -> Result<Vec<bool>, StoreError> {
        if outcomes.is_empty() {
            return Ok(Vec::new());
        }
        dispatch!(self, s => s.finish_jobs(outcomes).await)
    }

    /// Extends a lease while its claim holds.
    pub async fn renew_lease(
        &self,
        job: JobId,
        claim_token: Uuid,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let renewed = self.renew_leases(&[(job, claim_token)], until).await?;
        Ok(renewed == [job])
    }

    /// Extends the leases of many claims at once, each while its claim holds; returns the
    /// jobs renewed. On PostgreSQL it is one statement over arrays, delivery bookkeeping on
    /// the relaxed connections (see `PgStore::relaxed`); on SQLite one transaction.
    pub async fn renew_leases(
        &self,
        leases: &[(JobId, Uuid)],
        until: DateTime<Utc>,
    ) -> Result<Vec<JobId>, StoreError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            Self::Postgres(s) => {
                const SQL: &str = "UPDATE jobs j SET locked_until = $1 \
                    FROM UNNEST($2::uuid[], $3::uuid[]) AS r(id, token) \
                    WHERE j.id = r.id AND j.claim_token = r.token AND j.status = 'in_progress' \
                    RETURNING j.id";
                let ids: Vec<Uuid> = leases.iter().map(|(j, _)| j.as_uuid()).collect();
                let tokens: Vec<Uuid> = leases.iter().map(|(_, t)| *t).collect();
                let renewed: Vec<Uuid> = s
                    .relaxed()
                    .run(async |conn: &mut sqlx::PgConnection| {
                        sqlx::query_scalar(SQL)
                            .bind(At(until))
                            .bind(&ids)
                            .bind(&tokens)
                            .fetch_all(conn)
                            .await
                    })
                    .await?;
                Ok(renewed.into_iter().map(JobId::from_uuid).collect())
            }
            Self::Sqlite(s) => {
                const SQL: &str = "UPDATE jobs SET locked_until = $1 \
                    WHERE id = $2 AND claim_token = $3 AND status = 'in_progress'";
                let mut tx = s.pool.begin().await?;
                let mut renewed = Vec::new();
                for (job, token) in leases {
                    let done = sqlx::query(SQL)
                        .bind(At(until))
                        .bind(Id::from(*job))
                        .bind(Id(*token))
                        .execute(&mut *tx)
                        .await?;
                    if done.rows_affected() == 1 {
                        renewed.push(*job);
                    }
                }
                tx.commit().await?;
                Ok(renewed)
            }
        }
    }

    /// Something to wait on for new jobs: PostgreSQL LISTEN/NOTIFY, or an in-process signal.
    pub async fn job_waker(&self) -> Result<JobWaker, StoreError> {
        match self {
            Self::Postgres(s) => Ok(JobWaker::Postgres(Box::new(s.listen_for_jobs().await?))),
            Self::Sqlite(s) => Ok(JobWaker::Local(s.job_signal())),
        }
    }

    /// `in_progress` jobs whose lease ran out before `now`, oldest first.
    pub async fn expired_leases(
        &self,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<ExpiredLease>, StoreError> {
        const SQL: &str = "SELECT id, claim_token, attempts, destination FROM jobs \
            WHERE status = 'in_progress' AND locked_until < $1 ORDER BY locked_until LIMIT $2";
        let rows: Vec<LeaseRow> = dispatch!(self, s => sqlx::query_as(SQL)
            .bind(At(now))
            .bind(limit)
            .fetch_all(&s.pool)
            .await?);
        Ok(rows.into_iter().map(ExpiredLease::from).collect())
    }
}

pub enum JobWaker {
    Postgres(Box<sqlx::postgres::PgListener>),
    Local(Arc<Notify>),
}

impl JobWaker {
    /// Returns when new jobs may be due, or after `timeout`, whichever comes first.
    pub async fn wait(&mut self, timeout: Duration) {
        match self {
            Self::Postgres(listener) => {
                // An error (connection lost) degrades to polling; sqlx reconnects on next recv.
                let _ = tokio::time::timeout(timeout, listener.recv()).await;
            }
            Self::Local(notify) => {
                let _ = tokio::time::timeout(timeout, notify.notified()).await;
            }
        }
    }
}
