//! The retention sweep, in bounded batches. Each batch walks `events_received_idx` from the
//! oldest row (the `ORDER BY`), so a sweep with nothing to do reads nothing instead of
//! scanning the table. Deleting is one statement for both databases; purging, which keeps
//! the row, differs in how a batch is locked and written.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::codec::{At, Id};
use super::{Store, StoreError};

/// Events whose jobs are all finished: a pending or running job keeps its event.
const SETTLED: &str = "NOT EXISTS (SELECT 1 FROM jobs j WHERE j.event_id = e.id \
    AND j.status IN ('pending', 'in_progress'))";

impl Store {
    /// Deletes up to `limit` events received before the time whose jobs are all finished,
    /// with their jobs and attempts.
    pub async fn delete_expired_events(
        &self,
        received_before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let sql = format!(
            "DELETE FROM events WHERE id IN (SELECT e.id FROM events e \
             WHERE e.received_at < $1 AND {SETTLED} ORDER BY e.received_at LIMIT $2)"
        );
        Ok(dispatch!(self, s => sqlx::query(&sql)
            .bind(At(received_before))
            .bind(limit)
            .execute(&s.pool)
            .await?
            .rows_affected()))
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
