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

/// Keyset paging: the store was asked for `limit + 1` rows, so a row past `limit` means there
/// is a next page. Cuts `rows` to the page and answers the cursor after its last row.
pub fn next_page<T>(
    rows: &mut Vec<T>,
    limit: i64,
    position: impl Fn(&T) -> PageCursor,
) -> Option<String> {
    if rows.len() as i64 <= limit {
        return None;
    }
    rows.truncate(limit as usize);
    rows.last().map(|row| encode(&position(row)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(i: u128) -> PageCursor {
        PageCursor {
            at: chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            id: uuid::Uuid::from_u128(i),
        }
    }

    #[test]
    fn a_row_past_the_limit_makes_a_next_page_after_the_last_kept_row() {
        let mut rows: Vec<u128> = vec![1, 2, 3];
        let next = next_page(&mut rows, 2, |&i| at(i));
        assert_eq!(rows, vec![1, 2]);
        assert_eq!(decode(&next.unwrap()).unwrap().id, at(2).id);

        let mut rows: Vec<u128> = vec![1, 2];
        assert_eq!(next_page(&mut rows, 2, |&i| at(i)), None);
        assert_eq!(rows, vec![1, 2]);
    }
}
