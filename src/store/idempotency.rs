//! What a stored Idempotency-Key record means for a new request with the same key; the
//! same rules for both backends.

use super::{BulkProgress, IdempotencyBegin, StoreError};

pub(super) struct Record {
    pub request_hash: String,
    pub state: String,
    pub status_code: Option<i32>,
    pub response_body: Option<Vec<u8>>,
    pub progress: Option<String>,
}

impl Record {
    pub(super) fn verdict(
        self,
        request_hash: &str,
        stale: bool,
    ) -> Result<IdempotencyBegin, StoreError> {
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
            "started" => Ok(IdempotencyBegin::InProgress),
            other => Err(StoreError::Corrupt(format!("idempotency state {other:?}"))),
        }
    }
}
