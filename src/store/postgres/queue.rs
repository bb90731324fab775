//! PostgreSQL: the queue's claim and outcome statements, and LISTEN for new jobs. Both
//! statements run on the relaxed connections (see `PgStore::relaxed`).

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgListener;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::{PgStore, JOBS_CHANNEL};
use crate::domain::{EventId, JobId};
use crate::store::{AttemptOutcome, ClaimedJob, JobOutcome, StoreError};

/// Delivery outcomes, many at once (see `finish_jobs`). A job is matched by id and claim
/// token alone: a token is set only together with `status = 'in_progress'`, and every
/// statement that ends the claim clears it. Naming the status as well would offer the
/// planner a second way in, every `in_progress` entry of `jobs_lease_idx` (dead ones
/// included), which it takes when the statistics say few jobs are in progress.
pub const FINISH_JOBS_SQL: &str = "\
    WITH o AS ( \
        SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::timestamptz[], $5::text[], \
            $6::timestamptz[], $7::uuid[], $8::int4[], $9::text[], $10::timestamptz[], \
            $11::int8[], $12::int4[], $13::text[]) \
            AS o(job_id, token, status, next_at, error, now, attempt_id, attempt, worker_id, \
                started_at, duration_ms, status_code, outcome) \
    ), applied AS ( \
        UPDATE jobs j SET status = o.status, \
            next_attempt_at = COALESCE(o.next_at, j.next_attempt_at), last_error = o.error, \
            locked_until = NULL, claim_token = NULL, updated_at = o.now \
        FROM o WHERE j.id = o.job_id AND j.claim_token = o.token \
        RETURNING j.id \
    ), recorded AS ( \
        INSERT INTO delivery_attempts (id, job_id, attempt, worker_id, started_at, \
            duration_ms, status_code, error, outcome) \
        SELECT o.attempt_id, o.job_id, o.attempt, o.worker_id, o.started_at, o.duration_ms, \
            o.status_code, o.error, \
            CASE WHEN o.job_id IN (SELECT id FROM applied) THEN o.outcome ELSE $14 END \
        FROM o \
    ) \
    SELECT id FROM applied";

/// Claims up to `$3` due jobs of one destination (see `claim_jobs`). A keyed job is due
/// only at the head of its key's line (`nothing_ahead_sql`). Under READ COMMITTED the test
/// reads the statement's snapshot, which is safe: what blocks a job only ever stops
/// blocking by a committed change (a delivery's success, a discard), so a snapshot may
/// show a job blocked that is already free (the next claim takes it) but never free while
/// a job ahead of it is still in flight. Two claimers that both see the head free contend
/// for that one row: the loser skips it, or finds it no longer pending once it commits.
pub const CLAIM_JOBS_SQL: &str = concat!(
    "\
    WITH due AS ( \
        SELECT id FROM jobs j \
        WHERE status = 'pending' AND destination = $1 AND next_attempt_at <= $2 \
            AND NOT EXISTS (SELECT 1 FROM destination_states s \
                WHERE s.destination = $1 AND s.paused_at IS NOT NULL) AND ",
    nothing_ahead_sql!(),
    " \
        ORDER BY next_attempt_at LIMIT $3 FOR UPDATE OF j SKIP LOCKED \
     ), claimed AS ( \
        UPDATE jobs j SET status = 'in_progress', attempts = j.attempts + 1, \
            locked_until = $4, claim_token = $5, updated_at = $2 \
        FROM due WHERE j.id = due.id \
        RETURNING j.id, j.claim_token, j.attempts, j.destination, j.event_id \
     ) \
     SELECT c.id, c.claim_token, c.attempts, c.destination, c.event_id, e.source, \
        e.event_type, e.provider_event_id, e.content_type, e.body \
     FROM claimed c JOIN events e ON e.id = c.event_id"
);

impl PgStore {
    pub async fn claim_jobs(
        &self,
        destination: &str,
        limit: i64,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<ClaimedJob>, StoreError> {
        // SKIP LOCKED lets concurrent workers claim disjoint batches without waiting; the
        // statement is its own transaction, so nothing stays locked during delivery.
        let token = crate::domain::time_ordered_uuid();
        let rows = self
            .relaxed_connections
            .run(async |conn: &mut PgConnection| {
                sqlx::query(CLAIM_JOBS_SQL)
                    .bind(destination)
                    .bind(now)
                    .bind(limit)
                    .bind(lease_until)
                    .bind(token)
                    .fetch_all(conn)
                    .await
            })
            .await?;
        rows.iter()
            .map(|r| {
                Ok(ClaimedJob {
                    job_id: JobId::from_uuid(r.try_get("id")?),
                    claim_token: r.try_get("claim_token")?,
                    attempt: r.try_get("attempts")?,
                    destination: r.try_get("destination")?,
                    event_id: EventId::from_uuid(r.try_get("event_id")?),
                    source: r.try_get("source")?,
                    event_type: r.try_get("event_type")?,
                    provider_event_id: r.try_get("provider_event_id")?,
                    content_type: r.try_get("content_type")?,
                    body: r.try_get("body")?,
                })
            })
            .collect()
    }

    /// One statement for the whole batch: every update applies only where its claim token
    /// still holds the job, and every attempt is recorded (as `lease_lost` where it did not).
    pub async fn finish_jobs(&self, outcomes: &[JobOutcome]) -> Result<Vec<bool>, StoreError> {
        let statuses: Vec<_> = outcomes.iter().map(JobOutcome::status).collect();
        let query = sqlx::query_scalar(FINISH_JOBS_SQL)
            .bind(outcomes.iter().map(|o| o.job.as_uuid()).collect::<Vec<_>>())
            .bind(outcomes.iter().map(|o| o.claim_token).collect::<Vec<_>>())
            .bind(statuses.iter().map(|s| s.0).collect::<Vec<_>>())
            .bind(statuses.iter().map(|s| s.1).collect::<Vec<_>>())
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.error.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(outcomes.iter().map(|o| o.now).collect::<Vec<_>>())
            .bind(
                outcomes
                    .iter()
                    .map(|_| crate::domain::time_ordered_uuid())
                    .collect::<Vec<_>>(),
            )
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.attempt)
                    .collect::<Vec<_>>(),
            )
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.worker_id.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.started_at)
                    .collect::<Vec<_>>(),
            )
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.duration_ms)
                    .collect::<Vec<_>>(),
            )
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.status_code)
                    .collect::<Vec<_>>(),
            )
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.outcome.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(AttemptOutcome::LeaseLost.as_str());
        let applied: Vec<Uuid> = self
            .relaxed_connections
            .run(async |conn: &mut PgConnection| query.fetch_all(conn).await)
            .await?;
        let applied: HashSet<Uuid> = applied.into_iter().collect();
        Ok(outcomes
            .iter()
            .map(|o| applied.contains(&o.job.as_uuid()))
            .collect())
    }

    pub async fn listen_for_jobs(&self) -> Result<PgListener, StoreError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(JOBS_CHANNEL).await?;
        Ok(listener)
    }
}
