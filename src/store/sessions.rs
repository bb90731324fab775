//! Console sessions, kept in the database so that every instance on one PostgreSQL shares
//! them and a logout ends a session everywhere. The statements are the same on both stores
//! (times are unix seconds in both schemas), so each is written once and run on whichever
//! pool is in use.

use super::{Store, StoreError};

/// A session as stored: whose it is and its clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    pub tenant: String,
    pub created_at: i64,
    pub seen_at: i64,
    pub expires_at: i64,
}

impl Store {
    /// Stores a new session under the SHA-256 of its id.
    pub async fn create_session(
        &self,
        id_sha256: &[u8; 32],
        tenant: &str,
        now: i64,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        const SQL: &str = "INSERT INTO console_sessions \
            (id_sha256, tenant, created_at, seen_at, expires_at) VALUES ($1, $2, $3, $3, $4)";
        dispatch!(self, s => sqlx::query(SQL)
            .bind(id_sha256.as_slice())
            .bind(tenant)
            .bind(now)
            .bind(expires_at)
            .execute(&s.pool)
            .await
            .map(drop)?);
        Ok(())
    }

    pub async fn find_session(
        &self,
        id_sha256: &[u8; 32],
    ) -> Result<Option<StoredSession>, StoreError> {
        const SQL: &str = "SELECT tenant, created_at, seen_at, expires_at \
            FROM console_sessions WHERE id_sha256 = $1";
        let row: Option<(String, i64, i64, i64)> = dispatch!(self, s => sqlx::query_as(SQL)
            .bind(id_sha256.as_slice())
            .fetch_optional(&s.pool)
            .await?);
        Ok(
            row.map(|(tenant, created_at, seen_at, expires_at)| StoredSession {
                tenant,
                created_at,
                seen_at,
                expires_at,
            }),
        )
    }

    /// Records activity on a session, so its idle limit counts from `now`.
    pub async fn touch_session(&self, id_sha256: &[u8; 32], now: i64) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE console_sessions SET seen_at = $1 WHERE id_sha256 = $2";
        dispatch!(self, s => sqlx::query(SQL)
            .bind(now)
            .bind(id_sha256.as_slice())
            .execute(&s.pool)
            .await
            .map(drop)?);
        Ok(())
    }

    /// Ends a session (logout). Whether there was one.
    pub async fn delete_session(&self, id_sha256: &[u8; 32]) -> Result<bool, StoreError> {
        const SQL: &str = "DELETE FROM console_sessions WHERE id_sha256 = $1";
        let done = dispatch!(self, s => sqlx::query(SQL)
            .bind(id_sha256.as_slice())
            .execute(&s.pool)
            .await?
            .rows_affected());
        Ok(done == 1)
    }

    /// Deletes up to `limit` sessions past their absolute expiry or idle since `idle_before`.
    pub async fn sweep_sessions(
        &self,
        now: i64,
        idle_before: i64,
        limit: i64,
    ) -> Result<u64, StoreError> {
        const SQL: &str = "DELETE FROM console_sessions WHERE id_sha256 IN ( \
            SELECT id_sha256 FROM console_sessions WHERE expires_at <= $1 OR seen_at < $2 \
            LIMIT $3)";
        let done = dispatch!(self, s => sqlx::query(SQL)
            .bind(now)
            .bind(idle_before)
            .bind(limit)
            .execute(&s.pool)
            .await?
            .rows_affected());
        Ok(done)
    }
}
