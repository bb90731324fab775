//! SQLite: the retention sweep's deletes, in bounded batches (each a short write lock).

use chrono::{DateTime, Utc};
use sqlx::Connection;

use super::{millis, SqliteStore};
use crate::store::StoreError;

/// Events whose jobs are all finished: a pending or running job keeps its event.
const SETTLED: &str = "NOT EXISTS (SELECT 1 FROM jobs j WHERE j.event_id = e.id \
    AND j.status IN ('pending', 'in_progress'))";

impl SqliteStore {
    pub async fn delete_expired_events(
        &self,
        received_before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let sql = format!(
            "DELETE FROM events WHERE id IN (SELECT e.id FROM events e \
             WHERE e.received_at < ? AND {SETTLED} ORDER BY e.received_at LIMIT ?)"
        );
        let done = sqlx::query(&sql)
            .bind(millis(received_before))
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
        let (mut conn, _turn) = self.write_connection().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let sql = format!(
            "SELECT e.id FROM events e WHERE e.received_at < ? AND e.purged_at IS NULL \
             AND {SETTLED} ORDER BY e.received_at LIMIT ?"
        );
        let ids: Vec<String> = sqlx::query_scalar(&sql)
            .bind(millis(received_before))
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        for id in &ids {
            sqlx::query("DELETE FROM jobs WHERE event_id = ?")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("UPDATE events SET body = x'', headers = '[]', purged_at = ? WHERE id = ?")
                .bind(millis(now))
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(ids.len() as u64)
    }
}
