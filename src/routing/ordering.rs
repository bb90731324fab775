//! Per-key ordered delivery: a route's `ordering_key` names where an event's key is read
//! (`json:/pointer` into the body, or `header:Name`), and its `on_dead_letter` whether a
//! dead-lettered job keeps blocking its key. The store claims a keyed job only when no
//! earlier job of the same destination and key is still ahead of it (docs/DESTINATIONS.md).

use sha2::{Digest as _, Sha256};

/// Keys up to this many bytes are stored as sent; longer ones by their digest, since the
/// sender, not the operator, chooses them and each one is stored with every job.
pub const MAX_STORED_KEY: usize = 64;

const DIGEST_PREFIX: &str = "sha256:";

/// Where a route reads an event's ordering key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyLocation {
    Header(String),
    Json(String),
}

/// A route's ordering: where the key is read, and what a dead-lettered head does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderingRule {
    pub location: KeyLocation,
    /// `on_dead_letter = "hold"`: the key stays blocked behind its dead letter until an
    /// operator retries or discards it.
    pub hold: bool,
}

/// A job's place in an ordered line: its (bounded) key, and whether it holds the line if
/// it becomes a dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOrdering {
    pub key: String,
    pub hold: bool,
}

impl KeyLocation {
    /// `json:/pointer` or `header:Name`.
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some(name) = text.strip_prefix("header:") {
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b));
            if !valid {
                return Err(format!("is {text:?}: {name:?} is not a header name"));
            }
            return Ok(Self::Header(name.to_owned()));
        }
        if let Some(pointer) = text.strip_prefix("json:") {
            if !pointer.starts_with('/') {
                return Err(format!(
                    "is {text:?}: a JSON pointer starts with '/' (\"json:/data/object/customer\")"
                ));
            }
            return Ok(Self::Json(pointer.to_owned()));
        }
        Err(format!(
            "is {text:?}; expected \"json:/pointer\" or \"header:<Name>\""
        ))
    }
}

impl OrderingRule {
    /// The configured `on_dead_letter`: `"hold"` (the default) or `"skip"`.
    pub fn parse_on_dead_letter(text: Option<&str>) -> Result<bool, String> {
        match text {
            None | Some("hold") => Ok(true),
            Some("skip") => Ok(false),
            Some(other) => Err(format!("is {other:?}; expected \"hold\" or \"skip\"")),
        }
    }

    /// The key of an event from its headers and (lazily parsed) body document; none when the
    /// event lacks it, and then the job is unordered.
    pub(super) fn key_of<'d>(
        &self,
        headers: &[(&str, &str)],
        document: impl FnOnce() -> Option<&'d serde_json::Value>,
    ) -> Option<JobOrdering> {
        let raw = match &self.location {
            KeyLocation::Header(name) => headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| (*v).to_owned())?,
            KeyLocation::Json(pointer) => match document()?.pointer(pointer)? {
                serde_json::Value::Null => return None,
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            },
        };
        if raw.is_empty() {
            return None;
        }
        Some(JobOrdering {
            key: bounded_key(&raw),
            hold: self.hold,
        })
    }
}

/// The key as stored: as sent when short and plain, otherwise its SHA-256 digest, so a
/// stored key is at most 71 bytes whatever the sender puts in. A sent key that looks like
/// a digest is digested too, so no sender can join another key's line by naming its digest.
pub fn bounded_key(raw: &str) -> String {
    let plain = raw.len() <= MAX_STORED_KEY && !raw.contains('\0');
    if plain && !raw.starts_with(DIGEST_PREFIX) {
        return raw.to_owned();
    }
    let digest = Sha256::digest(raw.as_bytes());
    format!("{DIGEST_PREFIX}{}", hex::encode(digest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(location: &str) -> OrderingRule {
        OrderingRule {
            location: KeyLocation::parse(location).unwrap(),
            hold: true,
        }
    }

    #[test]
    fn reads_the_key_from_a_pointer_or_a_header() {
        let body = json!({"data": {"object": {"customer": "cus_1", "n": 7, "z": null}}});
        let key = |loc: &str| {
            rule(loc)
                .key_of(&[("x-shop", "a.example")], || Some(&body))
                .map(|o| o.key)
        };
        assert_eq!(key("json:/data/object/customer").as_deref(), Some("cus_1"));
        assert_eq!(key("json:/data/object/n").as_deref(), Some("7"));
        assert_eq!(key("json:/data/object/z"), None);
        assert_eq!(key("json:/data/missing"), None);
        assert_eq!(key("header:X-Shop").as_deref(), Some("a.example"));
        assert_eq!(key("header:X-Other"), None);
    }

    #[test]
    fn long_or_digest_like_keys_are_stored_by_digest() {
        assert_eq!(bounded_key("cus_1"), "cus_1");
        let long = "x".repeat(10_000);
        let stored = bounded_key(&long);
        assert_eq!(stored.len(), DIGEST_PREFIX.len() + 64);
        assert_ne!(bounded_key(&stored), stored);
        assert_ne!(bounded_key("a\0b"), "a\0b");
    }

    #[test]
    fn bad_locations_and_choices_are_refused() {
        assert!(KeyLocation::parse("json:data").is_err());
        assert!(KeyLocation::parse("header:").is_err());
        assert!(KeyLocation::parse("header:a b").is_err());
        assert!(KeyLocation::parse("query:x").is_err());
        assert_eq!(OrderingRule::parse_on_dead_letter(None), Ok(true));
        assert_eq!(OrderingRule::parse_on_dead_letter(Some("skip")), Ok(false));
        assert!(OrderingRule::parse_on_dead_letter(Some("drop")).is_err());
    }
}
