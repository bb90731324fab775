//! Opaque pagination cursors: base64url of the keyset position. Clients pass them back
//! unchanged; their content is not an API.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use super::error::AdminError;
use crate::store::PageCursor;

pub fn encode(cursor: &PageCursor) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(cursor).expect("a cursor serialises"))
}

pub fn decode(text: &str) -> Result<PageCursor, AdminError> {
    URL_SAFE_NO_PAD
        .decode(text)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .ok_or_else(|| AdminError::BadRequest("cursor is not one this API returned".into()))
}

/// `limit` from a query: default 50, at most 500.
pub fn limit(requested: Option<i64>) -> Result<i64, AdminError> {
    match requested {
        None => Ok(50),
        Some(n) if (1..=500).contains(&n) => Ok(n),
        Some(_) => Err(AdminError::BadRequest(
            "limit must be between 1 and 500".into(),
        )),
    }
}
