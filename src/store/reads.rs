//! Reads and gauges: one statement text for both databases, run on whichever pool is in use.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::codec::{At, Id};
use super::rows::{AttemptRow, EventRow, JobRow, EVENT_COLUMNS, JOB_COLUMNS};
use super::{Store, StoreError, StoredAttempt, StoredEvent, StoredJob};
use crate::domain::{EventId, JobId};
use crate::queue::JobStatus;

/// The oldest `next_attempt_at` among pending jobs due at `$1`, or NULL.
///
/// `MIN(next_attempt_at)` over all destinations cannot use `jobs_due_idx`, which leads with
/// the destination, so on a backlog of a million jobs the planner reads them all at every
/// scrape. Instead this walks the index's distinct destinations (one lookup each, a "skip
/// scan") and takes each one's oldest due job, one more lookup: O(destinations · log n).
/// It reads only the table, not the configuration, so jobs of a destination since removed
/// from the config still count.
const OLDEST_DUE_PENDING: &str = "\
    WITH RECURSIVE pending_destinations(name) AS ( \
        SELECT (SELECT destination FROM jobs WHERE status = 'pending' \
                ORDER BY destination LIMIT 1) \
        UNION ALL \
        SELECT (SELECT destination FROM jobs WHERE status = 'pending' AND destination > name \
                ORDER BY destination LIMIT 1) \
        FROM pending_destinations WHERE name IS NOT NULL \
    ) \
    SELECT MIN(oldest) FROM ( \
        SELECT (SELECT next_attempt_at FROM jobs \
                WHERE status = 'pending' AND destination = name AND next_attempt_at <= $1 \
                ORDER BY next_attempt_at LIMIT 1) AS oldest \
        FROM pending_destinations WHERE name IS NOT NULL \
    ) AS per_destination";

/// Unfinished jobs by status and destination: pending, in progress, and failed not discarded
/// (dead letters). Each part reads its own partial index (`jobs_due_idx`, `jobs_lease_idx`,
/// `jobs_dead_letters_idx`), so the cost follows the unfinished jobs. One scan with an `OR`
/// of the three conditions would read every job ever stored, succeeded ones included, whose
/// number grows with history until retention deletes them.
const COUNT_UNFINISHED_JOBS: &str = "\
    SELECT 'pending' AS status, destination, COUNT(*) FROM jobs \
    WHERE status = 'pending' GROUP BY destination \
    UNION ALL \
    SELECT 'in_progress', destination, COUNT(*) FROM jobs \
    WHERE status = 'in_progress' GROUP BY destination \
    UNION ALL \
    SELECT 'failed', destination, COUNT(*) FROM jobs \
    WHERE status = 'failed' AND discarded_at IS NULL GROUP BY destination";

impl Store {
    pub async fn get_event(&self, id: EventId) -> Result<Option<StoredEvent>, StoreError> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE id = $1");
        let row: Option<EventRow> = dispatch!(self, s => sqlx::query_as(&sql)
            .bind(Id::from(id))
            .fetch_optional(&s.pool)
            .await?);
        row.map(StoredEvent::try_from).transpose()
    }

    pub async fn find_event(
        &self,
        source: &str,
        provider_event_id: &str,
    ) -> Result<Option<StoredEvent>, StoreError> {
        // Through the dedupe key (`event_keys`): PostgreSQL's events carry no index on the
        // provider's id, and the key finds the event's partition.
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE id = (SELECT event_id FROM event_keys \
             WHERE source = $1 AND provider_event_id = $2)"
        );
        let row: Option<EventRow> = dispatch!(self, s => sqlx::query_as(&sql)
            .bind(source)
            .bind(provider_event_id)
            .fetch_optional(&s.pool)
            .await?);
        row.map(StoredEvent::try_from).transpose()
    }

    pub async fn jobs_for_event(&self, id: EventId) -> Result<Vec<StoredJob>, StoreError> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs j WHERE j.event_id = $1 ORDER BY j.destination, j.id"
        );
        let rows: Vec<JobRow> = dispatch!(self, s => sqlx::query_as(&sql)
            .bind(Id::from(id))
            .fetch_all(&s.pool)
            .await?);
        rows.into_iter().map(StoredJob::try_from).collect()
    }

    pub async fn get_job(&self, id: JobId) -> Result<Option<StoredJob>, StoreError> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs j WHERE j.id = $1");
        let row: Option<JobRow> = dispatch!(self, s => sqlx::query_as(&sql)
            .bind(Id::from(id))
            .fetch_optional(&s.pool)
            .await?);
        row.map(StoredJob::try_from).transpose()
    }

    pub async fn attempts_for_job(&self, id: JobId) -> Result<Vec<StoredAttempt>, StoreError> {
        const SQL: &str = "SELECT job_id, attempt, worker_id, started_at, duration_ms, \
            status_code, error, outcome FROM delivery_attempts WHERE job_id = $1 ORDER BY id";
        let rows: Vec<AttemptRow> = dispatch!(self, s => sqlx::query_as(SQL)
            .bind(Id::from(id))
            .fetch_all(&s.pool)
            .await?);
        Ok(rows.into_iter().map(StoredAttempt::from).collect())
    }

    pub async fn count_events(&self) -> Result<i64, StoreError> {
        const SQL: &str = "SELECT COUNT(*) FROM events";
        Ok(dispatch!(self, s => sqlx::query_scalar(SQL).fetch_one(&s.pool).await?))
    }

    pub async fn count_jobs(&self, status: JobStatus) -> Result<i64, StoreError> {
        const SQL: &str = "SELECT COUNT(*) FROM jobs WHERE status = $1";
        Ok(dispatch!(self, s => sqlx::query_scalar(SQL)
            .bind(status.as_str())
            .fetch_one(&s.pool)
            .await?))
    }

    /// Jobs that are not finished successfully, by status and destination (succeeded jobs
    /// are unbounded and left to the delivery counters).
    pub async fn count_jobs_by_status(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        Ok(dispatch!(self, s => sqlx::query_as(COUNT_UNFINISHED_JOBS)
            .fetch_all(&s.pool)
            .await?))
    }

    /// Age of the oldest due pending job: how far delivery is behind.
    pub async fn delivery_lag(&self, now: DateTime<Utc>) -> Result<Duration, StoreError> {
        let oldest: Option<At> = dispatch!(self, s => sqlx::query_scalar(OLDEST_DUE_PENDING)
            .bind(At(now))
            .fetch_one(&s.pool)
            .await?);
        Ok(oldest
            .and_then(|t| (now - t.0).to_std().ok())
            .unwrap_or_default())
    }
}
