//! SQLite: the queue's claim and outcome statements, each batch in one write transaction
//! (one commit, one fsync) on the write connection.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::Connection;
use tokio::sync::Notify;

use super::SqliteStore;
use crate::store::codec::{At, Id};
use crate::store::{AttemptOutcome, ClaimedJob, JobOutcome, StoreError};

/// Picks and claims in one statement: with the write lock held, no other claimer can see
/// these rows as pending in between. The pick reads the jobs as they were before the
/// update, so two jobs of one key are never picked together: the later one has the earlier
/// one pending ahead of it.
const CLAIM: &str = concat!(
    "\
    UPDATE jobs SET status = 'in_progress', attempts = attempts + 1, \
        locked_until = $1, claim_token = $2, updated_at = $3 \
    WHERE id IN (SELECT id FROM jobs j WHERE status = 'pending' AND destination = $4 \
        AND next_attempt_at <= $3 AND NOT EXISTS (SELECT 1 FROM destination_states s \
            WHERE s.destination = $4 AND s.paused_at IS NOT NULL) AND ",
    nothing_ahead_sql!(),
    " \
        ORDER BY next_attempt_at LIMIT $5) \
    RETURNING id"
);

/// What a worker needs to deliver a claimed job.
const CLAIMED: &str = "\
    SELECT j.attempts, j.destination, j.event_id, e.source, e.event_type, \
        e.provider_event_id, e.content_type, e.body \
    FROM jobs j JOIN events e ON e.id = j.event_id WHERE j.id = $1";

const FINISH: &str = "\
    UPDATE jobs SET status = $1, next_attempt_at = COALESCE($2, next_attempt_at), \
        last_error = $3, locked_until = NULL, claim_token = NULL, updated_at = $4 \
    WHERE id = $5 AND claim_token = $6 AND status = 'in_progress'";

const RECORD: &str = "\
    INSERT INTO delivery_attempts (id, job_id, attempt, worker_id, started_at, duration_ms, \
        status_code, error, outcome) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

#[derive(sqlx::FromRow)]
struct ClaimedRow {
    attempts: i32,
    destination: String,
    event_id: Id,
    source: String,
    event_type: Option<String>,
    provider_event_id: String,
    content_type: Option<String>,
    body: Vec<u8>,
}

impl SqliteStore {
    pub async fn claim_jobs(
        &self,
        destination: &str,
        limit: i64,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<ClaimedJob>, StoreError> {
        let token = crate::domain::time_ordered_uuid();
        let (mut conn, _turn) = self.write_connection().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let claimed: Vec<Id> = sqlx::query_scalar(CLAIM)
            .bind(At(lease_until))
            .bind(Id(token))
            .bind(At(now))
            .bind(destination)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        let mut jobs = Vec::with_capacity(claimed.len());
        for id in claimed {
            let r: ClaimedRow = sqlx::query_as(CLAIMED).bind(id).fetch_one(&mut *tx).await?;
            jobs.push(ClaimedJob {
                job_id: id.into(),
                claim_token: token,
                attempt: r.attempts,
                destination: r.destination,
                event_id: r.event_id.into(),
                source: r.source,
                event_type: r.event_type,
                provider_event_id: r.provider_event_id,
                content_type: r.content_type,
                body: r.body,
            });
        }
        tx.commit().await?;
        Ok(jobs)
    }

    /// Each update applies only where its claim token still holds the job, and each attempt
    /// is recorded.
    pub async fn finish_jobs(&self, outcomes: &[JobOutcome]) -> Result<Vec<bool>, StoreError> {
        let (mut conn, _turn) = self.write_connection().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let mut applied = Vec::with_capacity(outcomes.len());
        let mut requeued = false;
        for o in outcomes {
            let (status, next_attempt_at) = o.status();
            let done = sqlx::query(FINISH)
                .bind(status)
                .bind(next_attempt_at.map(At))
                .bind(o.record.error.as_deref())
                .bind(At(o.now))
                .bind(Id::from(o.job))
                .bind(Id(o.claim_token))
                .execute(&mut *tx)
                .await?
                .rows_affected()
                == 1;
            let outcome = if done {
                o.record.outcome
            } else {
                AttemptOutcome::LeaseLost
            };
            sqlx::query(RECORD)
                .bind(Id(crate::domain::time_ordered_uuid()))
                .bind(Id::from(o.job))
                .bind(o.record.attempt)
                .bind(&o.record.worker_id)
                .bind(At(o.record.started_at))
                .bind(o.record.duration_ms)
                .bind(o.record.status_code)
                .bind(o.record.error.as_deref())
                .bind(outcome.as_str())
                .execute(&mut *tx)
                .await?;
            requeued |= done && next_attempt_at.is_some();
            applied.push(done);
        }
        tx.commit().await?;
        if requeued {
            self.job_signal.notify_one();
        }
        Ok(applied)
    }

    pub fn job_signal(&self) -> Arc<Notify> {
        self.job_signal.clone()
    }
}
