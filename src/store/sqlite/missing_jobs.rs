//! SQLite: the reconciler's repair of events that have no job for a destination their
//! source routes to, one bounded step at a time.

use chrono::{DateTime, Utc};
use sqlx::{Connection, Row};

use super::{from_millis, millis, parse_uuid, SqliteStore};
use crate::domain::{EventId, JobId};
use crate::store::{ArrivalCursor, MissingJobsStep, StoreError};

impl SqliteStore {
    /// The events are read without the write lock (a WAL reader does not hold off the ingest
    /// writer), and the lock is taken only when some job is missing, which outside a change
    /// of routing is never. Under the lock each insert checks again, so two sweeping
    /// processes cannot both create the same job, and a purged event gets none.
    pub async fn create_missing_jobs(
        &self,
        source: &str,
        destination: &str,
        after: ArrivalCursor,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<MissingJobsStep, StoreError> {
        let rows = sqlx::query(
            "SELECT e.id, e.received_at, e.purged_at IS NULL AND NOT EXISTS ( \
                SELECT 1 FROM jobs j WHERE j.event_id = e.id AND j.destination = ?) AS missing \
             FROM events e WHERE e.source = ? AND e.received_at >= ? \
             AND (e.received_at, e.id) > (?, ?) ORDER BY e.received_at, e.id LIMIT ?",
        )
        .bind(destination)
        .bind(source)
        .bind(millis(after.received_at))
        .bind(millis(after.received_at))
        .bind(after.event.to_string())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let last = match rows.last() {
            Some(row) => {
                let id: String = row.try_get("id")?;
                Some(ArrivalCursor {
                    received_at: from_millis(row.try_get("received_at")?)?,
                    event: EventId::from_uuid(parse_uuid(&id)?),
                })
            }
            None => None,
        };
        let mut missing = Vec::new();
        for row in &rows {
            if row.try_get::<bool, _>("missing")? {
                missing.push(row.try_get::<String, _>("id")?);
            }
        }
        let mut created = 0;
        if !missing.is_empty() {
            let (mut conn, _turn) = self.write_connection().await?;
            let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
            for event_id in &missing {
                created += sqlx::query(
                    "INSERT INTO jobs (id, event_id, destination, status, attempts, \
                        next_attempt_at, created_at, updated_at) \
                     SELECT ?, e.id, ?, 'pending', 0, ?, ?, ? FROM events e \
                     WHERE e.id = ? AND e.purged_at IS NULL AND NOT EXISTS ( \
                        SELECT 1 FROM jobs j WHERE j.event_id = e.id AND j.destination = ?)",
                )
                .bind(JobId::generate().to_string())
                .bind(destination)
                .bind(millis(now))
                .bind(millis(now))
                .bind(millis(now))
                .bind(event_id)
                .bind(destination)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            }
            tx.commit().await?;
        }
        Ok(MissingJobsStep::after_reading(
            created,
            rows.len() as i64,
            limit,
            last,
        ))
    }
}
