//! Reading one value out of a JSON body by its pointer (RFC 6901) without building the
//! whole document: every request reads its event id (and type) this way, and a document
//! tree costs an allocation per key and string.
//!
//! The answer is exactly `serde_json::from_slice::<Value>(body)?.pointer(pointer)`: the
//! whole body is still parsed and checked the same way (a body that would not parse into a
//! `Value` is an error here too), a key that appears twice counts by its last occurrence,
//! and array indexes follow the same rules. Only the value the pointer names is built.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The value at `pointer` in `body`; `Ok(None)` when the document has no such value, `Err`
/// when `body` is not a JSON document. `pointer` is "" (the whole document) or starts with '/'.
pub fn pointer_value(body: &[u8], pointer: &str) -> Result<Option<Value>, serde_json::Error> {
    let Some(path) = tokens(pointer) else {
        // Not a pointer at all: no value, but the body must still be a document.
        serde_json::from_slice::<Skip>(body)?;
        return Ok(None);
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let found = Walk { path: &path }.deserialize(&mut de)?;
    de.end()?;
    Ok(found)
}

/// The unescaped reference tokens, as `Value::pointer` reads them; `None` when `pointer` is
/// neither empty nor starts with '/'.
fn tokens(pointer: &str) -> Option<Vec<String>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let rest = pointer.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

/// `Value::pointer`'s array index: decimal, no sign, no leading zero.
fn parse_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// Follows `path` down the document, skipping everything off it.
struct Walk<'p> {
    path: &'p [String],
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        if self.path.is_empty() {
            return serde::Deserialize::deserialize(d).map(Some);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (head, rest) = (&self.path[0], &self.path[1..]);
        let mut found = None;
        while let Some(is_head) = map.next_key_seed(KeyIs(head))? {
            if is_head {
                // A later copy of the key replaces an earlier one, as in a `Value` map.
                found = map.next_value_seed(Walk { path: rest })?;
            } else {
                map.next_value_seed(Skip)?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let (index, rest) = (parse_index(&self.path[0]), &self.path[1..]);
        let mut found = None;
        let mut i = 0;
        loop {
            if Some(i) == index {
                match seq.next_element_seed(Walk { path: rest })? {
                    Some(v) => found = v,
                    None => break,
                }
            } else if seq.next_element_seed(Skip)?.is_none() {
                break;
            }
            i += 1;
        }
        Ok(found)
    }

    // A scalar where the path goes on: nothing there.
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Whether a map key equals the token, compared without copying the key.
struct KeyIs<'t>(&'t str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

/// Parses a value the way `Value` would (same checks, same errors: numbers in range, valid
/// escapes, nesting limit) and keeps nothing. Not `IgnoredAny`: serde_json skips those with
/// laxer checks, and a body `Value` refuses must be refused here too.
struct Skip;

impl<'de> serde::Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Skip)
    }
}

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(Skip).map(|_| ())
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = Skip;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_key_seed(Skip)?.is_some() {
            map.next_value_seed(Skip)?;
        }
        Ok(Skip)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element_seed(Skip)?.is_some() {}
        Ok(Skip)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// What the gateway did before: the whole document as a `Value`, then `pointer`.
    fn by_tree(body: &[u8], pointer: &str) -> Result<Option<Value>, ()> {
        let doc: Value = serde_json::from_slice(body).map_err(|_| ())?;
        Ok(doc.pointer(pointer).cloned())
    }

    fn same(body: &str, pointer: &str) {
        assert_eq!(
            pointer_value(body.as_bytes(), pointer).map_err(|_| ()),
            by_tree(body.as_bytes(), pointer),
            "body {body:?}, pointer {pointer:?}"
        );
    }

    #[test]
    fn reads_what_the_document_tree_reads() {
        let body = r#"{"id":"evt_1","data":{"object":{"id":"in_1","lines":[{"n":7},{"n":-3}]}},
            "a/b":{"m~n":true},"n":18446744073709551615,"f":1.5,"e":"","z":null}"#;
        for p in [
            "",
            "/id",
            "/data/object/id",
            "/data/object/lines/1/n",
            "/data/object/lines/01/n",
            "/data/object/lines/+1/n",
            "/data/object/lines/2",
            "/a~1b/m~0n",
            "/n",
            "/f",
            "/e",
            "/z",
            "/id/x",
            "/missing",
            "id",
            "/data/object/lines/-",
        ] {
            same(body, p);
        }
    }

    #[test]
    fn a_repeated_key_counts_by_its_last_copy() {
        same(r#"{"id":"first","id":"second"}"#, "/id");
        same(r#"{"d":{"id":"x"},"d":{"other":1}}"#, "/d/id");
        same(r#"{"d":{"other":1},"d":{"id":"x"}}"#, "/d/id");
        same(r#"{"\u0069d":"escaped key"}"#, "/id");
    }

    #[test]
    fn refuses_what_the_document_tree_refuses() {
        for body in [
            "",
            "{",
            r#"{"id":"x"} trailing"#,
            r#"{"id":"x","n":1e400}"#,
            r#"{"s":"\ud800"}"#,
            r#"{"id":"x",}"#,
            "[1,2,]",
            "nul",
        ] {
            assert!(by_tree(body.as_bytes(), "/id").is_err(), "{body:?}");
            assert!(pointer_value(body.as_bytes(), "/id").is_err(), "{body:?}");
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(by_tree(deep.as_bytes(), "/0").is_err());
        assert!(pointer_value(deep.as_bytes(), "/0").is_err());
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e9f64..1e9).prop_map(Value::from),
            "[a-c/~]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(("[a-c/~]{0,2}", inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_document_any_pointer(
            doc in json_value(),
            path in prop::collection::vec("[a-c0-2/~+]{0,2}", 0..4),
            duplicate in any::<bool>(),
        ) {
            let mut body = serde_json::to_string(&doc).unwrap();
            // Repeat the first key of an object document with another value.
            if duplicate && body.starts_with("{\"") {
                body = format!("{{\"{}\":[7],{}", doc.as_object().unwrap().keys().next().unwrap()
                    .replace('\\', "\\\\").replace('"', "\\\""), &body[1..]);
            }
            let pointer: String = path.iter().map(|t| format!("/{t}")).collect();
            same(&body, &pointer);
        }
    }
}
