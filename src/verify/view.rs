//! Reading values out of a request: headers, query parameters, body fields and digests.

use std::cell::OnceCell;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::definition::Location;
use super::json_pointer::{parse_index, pointer_values};
use super::request::{RequestHeaders, Unverified};

/// The body is not a JSON document, and a value was to be read from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MalformedBody;

/// The most values a `*` pointer may expand to: more array elements than any provider batches.
pub const MAX_EXPANDED: usize = 1000;

/// A request, with its query parsed and its body fields read on demand.
pub struct RequestView<'a> {
    pub headers: &'a RequestHeaders,
    pub body: &'a [u8],
    pub method: &'a str,
    pub raw_query: &'a str,
    query: Vec<(String, String)>,
    form: OnceCell<Vec<(String, String)>>,
    fields: BodyFields<'a>,
}

impl<'a> RequestView<'a> {
    /// `pointers`: every body field the definition reads, found in one pass when first asked.
    pub fn new(request: &'a Unverified, pointers: &'a [String]) -> Self {
        Self {
            headers: &request.headers,
            body: &request.body,
            method: &request.method,
            raw_query: &request.query,
            query: url::form_urlencoded::parse(request.query.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
            form: OnceCell::new(),
            fields: BodyFields {
                body: &request.body,
                pointers,
                values: OnceCell::new(),
            },
        }
    }

    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value at `location`: the first value of a header or query parameter, a body
    /// field's text, or a digest.
    pub fn value(&self, location: &Location) -> Result<Option<String>, MalformedBody> {
        Ok(match location {
            Location::Header(h) => self.headers.get_all(h).next().map(str::to_owned),
            Location::Query(q) => self.query(q).map(str::to_owned),
            Location::Form(name) => self
                .form
                .get_or_init(|| {
                    url::form_urlencoded::parse(self.body)
                        .map(|(k, v)| (k.into_owned(), v.into_owned()))
                        .collect()
                })
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone()),
            Location::Json(pointer) => self.fields.get(pointer)?.and_then(text_of),
            Location::Digest(fields) => self.digest(fields)?,
            // Unique, not secret: a UUIDv7 (time and 74 random bits) is enough.
            Location::Random => Some(format!("random:{}", uuid::Uuid::now_v7().simple())),
        })
    }

    /// The value, where a missing or malformed one is simply absent (templates, handshakes).
    pub fn lookup(&self, location: &Location) -> Option<String> {
        self.value(location).ok().flatten()
    }

    /// `sha256:` and lower-case hex over the body, or over each field's length (8 bytes,
    /// big-endian) and bytes, so that no two field lists give the same input.
    fn digest(&self, fields: &[Location]) -> Result<Option<String>, MalformedBody> {
        let mut hash = Sha256::new();
        if fields.is_empty() {
            hash.update(self.body);
        }
        for field in fields {
            // A `*` pointer contributes every value it finds (HubSpot's batch of eventIds).
            let values = match field {
                Location::Json(p) if p.contains("/*") => self.expand(p)?,
                other => vec![self.value(other)?],
            };
            let Some(values) = values.into_iter().collect::<Option<Vec<_>>>() else {
                return Ok(None);
            };
            if values.is_empty() {
                return Ok(None);
            }
            for v in values {
                hash.update((v.len() as u64).to_be_bytes());
                hash.update(v.as_bytes());
            }
        }
        Ok(Some(format!("sha256:{}", hex::encode(hash.finalize()))))
    }

    /// The text at a pointer whose `*` segments stand for each element of an array, one
    /// entry per element reached (`None` where it has no such text). The body is parsed
    /// whole for this (Microsoft Graph's notification batches, HubSpot's event ids).
    pub fn expand(&self, pointer: &str) -> Result<Vec<Option<String>>, MalformedBody> {
        let doc: Value = serde_json::from_slice(self.body).map_err(|_| MalformedBody)?;
        let mut at = vec![Some(&doc)];
        for token in pointer.split('/').skip(1) {
            let token = token.replace("~1", "/").replace("~0", "~");
            let mut next = Vec::new();
            for v in at {
                match (token.as_str(), v) {
                    ("*", Some(Value::Array(items))) => next.extend(items.iter().map(Some)),
                    (_, Some(Value::Object(map))) => next.push(map.get(&token)),
                    (_, Some(Value::Array(items))) => {
                        next.push(parse_index(&token).and_then(|i| items.get(i)))
                    }
                    _ => next.push(None),
                }
            }
            if next.len() > MAX_EXPANDED {
                return Err(MalformedBody);
            }
            at = next;
        }
        Ok(at.into_iter().map(|v| v.and_then(text_of)).collect())
    }
}

/// A value's text: strings as they are, integers that fit 64 bits as decimal (a larger
/// number would be rounded, and two ids could collide); nothing for other values.
fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        _ => None,
    }
}

/// The body fields a definition reads, all found in one pass over the body the first time
/// one is asked for: a request whose values all come from headers never parses its body.
struct BodyFields<'a> {
    body: &'a [u8],
    pointers: &'a [String],
    values: OnceCell<Result<Vec<Option<Value>>, serde_json::Error>>,
}

impl BodyFields<'_> {
    fn get(&self, pointer: &str) -> Result<Option<&Value>, MalformedBody> {
        let values = self
            .values
            .get_or_init(|| {
                let pointers: Vec<&str> = self.pointers.iter().map(String::as_str).collect();
                pointer_values(self.body, &pointers)
            })
            .as_ref()
            .map_err(|_| MalformedBody)?;
        let at = self.pointers.iter().position(|p| p == pointer);
        Ok(at.and_then(|i| values[i].as_ref()))
    }
}

/// The first of `names` present once; a header sent twice is refused rather than guessed at.
pub fn single_header<'a>(
    headers: &'a RequestHeaders,
    names: &[String],
) -> Result<Option<&'a str>, ()> {
    use super::request::HeaderLookup;
    for name in names {
        match headers.get_one(name) {
            HeaderLookup::Absent => continue,
            HeaderLookup::One(v) => return Ok(Some(v)),
            HeaderLookup::Repeated => return Err(()),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `*` pointer reads array indexes as every other pointer does (RFC 6901: no sign, no
    /// leading zero), so `/a/*/01` reaches nothing rather than element 1.
    #[test]
    fn expansion_reads_indexes_as_plain_pointers_do() {
        let request = Unverified::new(
            RequestHeaders::new(),
            bytes::Bytes::from_static(br#"{"a":[["x","y"]]}"#),
        );
        let view = RequestView::new(&request, &[]);
        assert_eq!(view.expand("/a/*/1"), Ok(vec![Some("y".to_owned())]));
        for index in ["01", "+1", "1.0", "-0"] {
            assert_eq!(
                view.expand(&format!("/a/*/{index}")),
                Ok(vec![None]),
                "{index}"
            );
        }
    }
}
