//! The retention sweep. PostgreSQL drops whole time partitions (`postgres::partitions`);
//! SQLite deletes in bounded batches, each walking `events_received_idx` from the oldest row
//! (the `ORDER BY`), so a sweep with nothing to do reads nothing instead of scanning the
//! table. Purging, which keeps the row, differs in how a batch is locked and written.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::codec::{At, Id};
use super::{Store, StoreError};

/// Events whose jobs are all finished: a pending or running job keeps its event.
const SETTLED: &str = "NOT EXISTS (SELECT 1 FROM jobs j WHERE j.event_id = e.id \
    AND j.status IN ('pending', 'in_progress'))";

/// What a retention sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RetentionSwept {
    /// Events past retention, deleted (or dropped with their partition) with their history.
    pub expired_events: u64,
    /// Events past content retention whose ids are still kept for dedupe: content removed
    /// (SQLite, whose events table is its dedupe key).
    pub purged_events: u64,
    /// Dedupe keys past the longer of the two windows, forgotten (PostgreSQL).
    pub forgotten_keys: u64,
    /// Partitions dropped (PostgreSQL).
    pub dropped_partitions: u64,
    /// Expired partitions kept because a job in them is unfinished (PostgreSQL).
    pub held_partitions: u64,
}

impl Store {
    /// Retention: an event's content and history go once it was received before
    /// `content_before` and its jobs are finished; its provider id, the dedupe key, before
    /// `keys_before`. SQLite deletes in batches of `batch`, and purges the content of rows
    /// whose key is still kept; PostgreSQL drops expired time partitions and forgets keys in
    /// batches (their own table).
    pub async fn sweep_retention(
        &self,
        content_before: DateTime<Utc>,
        keys_before: DateTime<Utc>,
        now: DateTime<Utc>,
        batch: i64,
    ) -> Result<RetentionSwept, StoreError> {
        let mut swept = RetentionSwept::default();
        match self {
            Store::Postgres(s) => {
                s.ensure_partitions(now).await?;
                let p = s.drop_expired_partitions(content_before, batch).await?;
                swept.expired_events = p.expired_events;
                swept.dropped_partitions = p.dropped;
                swept.held_partitions = p.held;
                swept.forgotten_keys = s.forget_expired_keys(keys_before, batch).await?;
            }
            Store::Sqlite(_) => {
                if keys_before < content_before {
                    swept.purged_events = drain(batch, || {
                        self.purge_expired_events(content_before, now, batch)
                    })
                    .await?;
                }
                swept.expired_events =
                    drain(batch, || self.delete_expired_events(keys_before, batch)).await?;
            }
        }
        Ok(swept)
    }

    /// Deletes up to `limit` events received before the time whose jobs are all finished,
    /// with their jobs and attempts.
    pub async fn delete_expired_events(
        &self,
        received_before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        match self {
            Store::Postgres(s) => s.delete_settled(None, received_before, limit).await,
            // Jobs and attempts go by the foreign keys' cascade.
            Store::Sqlite(s) => Ok(sqlx::query(&format!(
                "DELETE FROM events WHERE id IN (SELECT e.id FROM events e \
                 WHERE e.received_at < $1 AND {SETTLED} ORDER BY e.received_at LIMIT $2)"
            ))
            .bind(At(received_before))
            .bind(limit)
            .execute(&s.pool)
            .await?
            .rows_affected()),
        }
    }

    /// Empties the body and headers and deletes the jobs of up to `limit` settled events
    /// received before the time, keeping the row so its provider id still dedupes.
    pub async fn purge_expired_events(
        &self,
        received_before: DateTime<Utc>,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let select = |lock: &str| {
            format!(
                "SELECT e.id FROM events e WHERE e.received_at < $1 AND e.purged_at IS NULL \
                 AND {SETTLED} ORDER BY e.received_at LIMIT $2{lock}"
            )
        };
        match self {
            // The batch's events are locked as they are read (`SKIP LOCKED`: concurrent
            // sweeps take disjoint batches), and each statement takes the batch as an array.
            Store::Postgres(s) => {
                let mut tx = s.pool.begin().await?;
                let ids: Vec<Uuid> = sqlx::query_scalar(&select(" FOR UPDATE SKIP LOCKED"))
                    .bind(At(received_before))
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await?;
                if !ids.is_empty() {
                    sqlx::query(
                        "DELETE FROM delivery_attempts WHERE job_id IN \
                         (SELECT id FROM jobs WHERE event_id = ANY($1))",
                    )
                    .bind(&ids)
                    .execute(&mut *tx)
                    .await?;
                    sqlx::query("DELETE FROM jobs WHERE event_id = ANY($1)")
                        .bind(&ids)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "UPDATE events SET body = '', headers = '[]'::jsonb, purged_at = $2 \
                         WHERE id = ANY($1)",
                    )
                    .bind(&ids)
                    .bind(At(now))
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(ids.len() as u64)
            }
            // One event at a time, under the write lock, which also keeps sweeps apart.
            Store::Sqlite(s) => {
                let (mut conn, _turn) = s.write_connection().await?;
                let mut tx = sqlx::Connection::begin_with(&mut *conn, "BEGIN IMMEDIATE").await?;
                let ids: Vec<Id> = sqlx::query_scalar(&select(""))
                    .bind(At(received_before))
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await?;
                for &id in &ids {
                    sqlx::query("DELETE FROM jobs WHERE event_id = $1")
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "UPDATE events SET body = x'', headers = '[]', purged_at = $1 WHERE id = $2",
                    )
                    .bind(At(now))
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(ids.len() as u64)
            }
        }
    }
}

/// Runs `step` until a batch comes back short of `batch`; the total.
pub(super) async fn drain<F, Fut>(batch: i64, mut step: F) -> Result<u64, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, StoreError>>,
{
    let mut total = 0;
    loop {
        let n = step().await?;
        total += n;
        if n < batch as u64 {
            return Ok(total);
        }
    }
}
