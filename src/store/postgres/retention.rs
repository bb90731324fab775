//! PostgreSQL: the retention sweep's deletes, in bounded batches. Each walks `events_received_idx`
//! from the oldest row (the `ORDER BY`), so a sweep with nothing to do reads nothing instead of
//! scanning the table.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::PgStore;
use crate::store::StoreError;

/// Events whose jobs are all finished: a pending or running job keeps its event.
const SETTLED: &str = "NOT EXISTS (SELECT 1 FROM jobs j WHERE j.event_id = e.id \
    AND j.status IN ('pending', 'in_progress'))";

impl PgStore {
    pub async fn delete_expired_events(
        &self,
        received_before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let sql = format!(
            "DELETE FROM events WHERE id IN (SELECT e.id FROM events e \
             WHERE e.received_at < $1 AND {SETTLED} ORDER BY e.received_at LIMIT $2)"
        );
        let done = sqlx::query(&sql)
            .bind(received_before)
            .bind(limit)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    pub async fn purge_expired_events(
        &self,
        received_before: DateTime<Utc>,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let sql = format!(
            "SELECT e.id FROM events e WHERE e.received_at < $1 AND e.purged_at IS NULL \
             AND {SETTLED} ORDER BY e.received_at LIMIT $2 FOR UPDATE SKIP LOCKED"
        );
        let ids: Vec<Uuid> = sqlx::query_scalar(&sql)
            .bind(received_before)
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
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(ids.len() as u64)
    }
}
