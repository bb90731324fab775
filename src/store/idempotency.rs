//! Idempotency-Key records: the statements (one text for both databases) and what a stored
//! record means for a new request with the same key.

use chrono::{DateTime, Utc};

use super::codec::At;
use super::{BulkProgress, IdempotencyBegin, SavedResponse, Store, StoreError};

/// Marks the key completed with its response, inside the caller's transaction `$tx`.
macro_rules! save_response {
    ($tx:ident, $save:expr, $now:expr) => {
        sqlx::query(
            "UPDATE idempotency_keys SET state = 'completed', status_code = $1, \
             response_body = $2, progress = NULL, updated_at = $3 \
             WHERE tenant = $4 AND idempotency_key = $5",
        )
        .bind(i32::from($save.status))
        .bind($save.body)
        .bind($crate::store::codec::At($now))
        .bind($save.tenant)
        .bind($save.key)
        .execute(&mut *$tx)
        .await?
    };
}

/// Records a bulk action's progress under its key, inside the caller's transaction `$tx`.
macro_rules! save_progress {
    ($tx:ident, $key:expr, $progress:expr, $now:expr) => {
        sqlx::query(
            "UPDATE idempotency_keys SET progress = $1, updated_at = $2 \
             WHERE tenant = $3 AND idempotency_key = $4",
        )
        .bind(serde_json::to_string($progress).expect("progress serialises"))
        .bind($crate::store::codec::At($now))
        .bind($key.tenant)
        .bind($key.key)
        .execute(&mut *$tx)
        .await?
    };
}

#[derive(sqlx::FromRow)]
struct Record {
    request_hash: String,
    state: String,
    status_code: Option<i32>,
    response_body: Option<Vec<u8>>,
    progress: Option<String>,
    updated_at: At,
}

impl Record {
    fn verdict(self, request_hash: &str, stale: bool) -> Result<IdempotencyBegin, StoreError> {
        if self.request_hash != request_hash {
            return Ok(IdempotencyBegin::Mismatch);
        }
        match self.state.as_str() {
            "completed" => Ok(IdempotencyBegin::Completed {
                status: self
                    .status_code
                    .and_then(|s| u16::try_from(s).ok())
                    .ok_or_else(|| StoreError::Corrupt("completed key without status".into()))?,
                body: self.response_body.unwrap_or_default(),
            }),
            "started" if stale => Ok(IdempotencyBegin::Proceed {
                progress: self
                    .progress
                    .map(|p| serde_json::from_str::<BulkProgress>(&p))
                    .transpose()
                    .map_err(|e| StoreError::Corrupt(format!("idempotency progress: {e}")))?,
            }),
            "started" => Ok(IdempotencyBegin::InProgress {
                done: self
                    .progress
                    .and_then(|p| serde_json::from_str::<BulkProgress>(&p).ok())
                    .map(|p| p.done),
            }),
            other => Err(StoreError::Corrupt(format!("idempotency state {other:?}"))),
        }
    }
}

impl Store {
    /// Records that a request with this key starts, or says how an earlier one stands.
    pub async fn idempotency_begin(
        &self,
        tenant: &str,
        key: &str,
        request_hash: &str,
        now: DateTime<Utc>,
        stale_before: DateTime<Utc>,
    ) -> Result<IdempotencyBegin, StoreError> {
        const INSERT: &str = "INSERT INTO idempotency_keys (tenant, idempotency_key, \
            request_hash, state, created_at, updated_at) VALUES ($1, $2, $3, 'started', $4, $4) \
            ON CONFLICT (tenant, idempotency_key) DO NOTHING";
        const READ: &str = "SELECT request_hash, state, status_code, response_body, progress, \
            updated_at FROM idempotency_keys WHERE tenant = $1 AND idempotency_key = $2";
        const RECLAIM: &str = "UPDATE idempotency_keys SET updated_at = $1 WHERE tenant = $2 \
            AND idempotency_key = $3 AND state = 'started' AND updated_at = $4";
        let inserted = dispatch!(self, s => sqlx::query(INSERT)
            .bind(tenant)
            .bind(key)
            .bind(request_hash)
            .bind(At(now))
            .execute(&s.pool)
            .await?
            .rows_affected());
        if inserted == 1 {
            return Ok(IdempotencyBegin::Proceed { progress: None });
        }
        let record: Option<Record> = dispatch!(self, s => sqlx::query_as(READ)
            .bind(tenant)
            .bind(key)
            .fetch_optional(&s.pool)
            .await?);
        let Some(record) = record else {
            // Swept between the two statements: nothing is running under this key.
            return Ok(IdempotencyBegin::InProgress { done: None });
        };
        let updated_at = record.updated_at;
        let verdict = record.verdict(request_hash, updated_at.0 < stale_before)?;
        if let IdempotencyBegin::Proceed { .. } = verdict {
            // Reclaim the abandoned record, unless another request just did.
            let claimed = dispatch!(self, s => sqlx::query(RECLAIM)
                .bind(At(now))
                .bind(tenant)
                .bind(key)
                .bind(updated_at)
                .execute(&s.pool)
                .await?
                .rows_affected());
            if claimed != 1 {
                return Ok(IdempotencyBegin::InProgress { done: None });
            }
        }
        Ok(verdict)
    }

    /// Saves a response that changed nothing (a 4xx).
    pub async fn idempotency_save(
        &self,
        save: &SavedResponse<'_>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        in_write_tx!(self, tx => {
            save_response!(tx, save, now);
        });
        Ok(())
    }

    /// Forgets a started key (after a 5xx), so the client may retry.
    pub async fn idempotency_release(&self, tenant: &str, key: &str) -> Result<(), StoreError> {
        const SQL: &str = "DELETE FROM idempotency_keys WHERE tenant = $1 \
            AND idempotency_key = $2 AND state = 'started'";
        dispatch!(self, s => sqlx::query(SQL)
            .bind(tenant)
            .bind(key)
            .execute(&s.pool)
            .await
            .map(drop)?);
        Ok(())
    }

    /// Deletes up to `limit` records created before `created_before`.
    pub async fn sweep_idempotency(
        &self,
        created_before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        const SQL: &str = "DELETE FROM idempotency_keys WHERE (tenant, idempotency_key) IN ( \
            SELECT tenant, idempotency_key FROM idempotency_keys WHERE created_at < $1 LIMIT $2)";
        Ok(dispatch!(self, s => sqlx::query(SQL)
            .bind(At(created_before))
            .bind(limit)
            .execute(&s.pool)
            .await?
            .rows_affected()))
    }
}
