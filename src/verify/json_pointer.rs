//! Reading values out of a JSON body by their pointers (RFC 6901) in one pass, without
//! building the whole document: every request reads its event id (and type) this way, and
//! a document tree costs an allocation per key and string.
//!
//! Each answer is exactly `serde_json::from_slice::<Value>(body)?.pointer(pointer)`: the
//! whole body is still parsed and checked the same way (a body that would not parse into a
//! `Value` is an error here too), a key that appears twice counts by its last occurrence,
//! and array indexes follow the same rules. Only the values the pointers name are built.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The value at each of `pointers`, in their order, read in one pass over `body`: a
/// definition reads its event id and type from one body, and each pass is a full parse.
/// `None` where the document has no such value; `Err` when `body` is not a JSON document.
/// A pointer is "" (the whole document) or starts with '/'.
pub fn pointer_values(
    body: &[u8],
    pointers: &[&str],
) -> Result<Vec<Option<Value>>, serde_json::Error> {
    let paths: Vec<Option<Vec<String>>> = pointers.iter().map(|p| tokens(p)).collect();
    // A string that is not a pointer at all has no value, but the body must still parse.
    let walked: Vec<(usize, &[String])> = paths
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.as_deref().map(|p| (i, p)))
        .collect();
    let mut values = vec![None; pointers.len()];
    if walked.is_empty() {
        serde_json::from_slice::<Skip>(body)?;
        return Ok(values);
    }
    // A key is matched against a path set as a bit mask.
    for chunk in walked.chunks(u64::BITS as usize) {
        let chunk_paths: Vec<&[String]> = chunk.iter().map(|(_, p)| *p).collect();
        let mut de = serde_json::Deserializer::from_slice(body);
        let found = Walk {
            paths: &chunk_paths,
        }
        .deserialize(&mut de)?;
        de.end()?;
        for ((i, _), value) in chunk.iter().zip(found) {
            values[*i] = value;
        }
    }
    Ok(values)
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
pub(super) fn parse_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// `Value::pointer` along already unescaped tokens.
fn descend<'v>(mut value: &'v Value, path: &[String]) -> Option<&'v Value> {
    for token in path {
        value = match value {
            Value::Object(map) => map.get(token)?,
            Value::Array(items) => items.get(parse_index(token)?)?,
            _ => return None,
        };
    }
    Some(value)
}

/// Follows every one of `paths` (at most 64) down the document at once, skipping whatever
/// is off all of them; the answer has one entry per path.
struct Walk<'p> {
    paths: &'p [&'p [String]],
}

impl Walk<'_> {
    fn nothing(&self) -> Vec<Option<Value>> {
        vec![None; self.paths.len()]
    }

    /// The paths whose next token is selected by `mask`, past that token.
    fn below(&self, mask: u64) -> Vec<&[String]> {
        selected(mask, self.paths.len())
            .map(|i| &self.paths[i][1..])
            .collect()
    }

    /// Puts the answers for the paths in `mask` (in order) into `into`.
    fn assign(mask: u64, answers: Vec<Option<Value>>, into: &mut [Option<Value>]) {
        for (i, answer) in selected(mask, into.len()).zip(answers) {
            into[i] = answer;
        }
    }
}

/// The mask of the paths for which `matches` is true.
fn mask_of(matches: impl Iterator<Item = bool>) -> u64 {
    matches
        .enumerate()
        .filter(|(_, m)| *m)
        .fold(0, |mask, (bit, _)| mask | (1 << bit))
}

/// The indexes of the paths in `mask`, in order.
fn selected(mask: u64, len: usize) -> impl Iterator<Item = usize> {
    (0..len).filter(move |i| mask & (1 << i) != 0)
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = Vec<Option<Value>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        if self.paths.iter().any(|p| p.is_empty()) {
            // Some path ends here and wants this whole value: build it once, answer all.
            let value: Value = serde::Deserialize::deserialize(d)?;
            return Ok(self
                .paths
                .iter()
                .map(|p| descend(&value, p).cloned())
                .collect());
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = Vec<Option<Value>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = self.nothing();
        while let Some(mask) = map.next_key_seed(KeyMask(self.paths))? {
            if mask == 0 {
                map.next_value_seed(Skip)?;
            } else {
                // A later copy of the key replaces an earlier one, as in a `Value` map.
                let answers = map.next_value_seed(Walk {
                    paths: &self.below(mask),
                })?;
                Self::assign(mask, answers, &mut found);
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let indexes: Vec<Option<usize>> = self.paths.iter().map(|p| parse_index(&p[0])).collect();
        let mut found = self.nothing();
        let mut i = 0;
        loop {
            let mask = mask_of(indexes.iter().map(|index| *index == Some(i)));
            if mask == 0 {
                if seq.next_element_seed(Skip)?.is_none() {
                    break;
                }
            } else {
                match seq.next_element_seed(Walk {
                    paths: &self.below(mask),
                })? {
                    Some(answers) => Self::assign(mask, answers, &mut found),
                    None => break,
                }
            }
            i += 1;
        }
        Ok(found)
    }

    // A scalar where the paths go on: nothing there.
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(self.nothing())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(self.nothing())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(self.nothing())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(self.nothing())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(self.nothing())
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(self.nothing())
    }
}

/// Which paths' next token a map key equals, as a bit mask; compared without copying the key.
struct KeyMask<'p>(&'p [&'p [String]]);

impl<'de> DeserializeSeed<'de> for KeyMask<'_> {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyMask<'_> {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<u64, E> {
        Ok(mask_of(self.0.iter().map(|path| path[0] == key)))
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

    /// The reference the walk must match: the whole document as a `Value`, then `pointer`.
    fn by_tree(body: &[u8], pointer: &str) -> Result<Option<Value>, ()> {
        let doc: Value = serde_json::from_slice(body).map_err(|_| ())?;
        Ok(doc.pointer(pointer).cloned())
    }

    fn pointer_value(body: &[u8], pointer: &str) -> Result<Option<Value>, serde_json::Error> {
        Ok(pointer_values(body, &[pointer])?.pop().flatten())
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

    /// `doc` as text; with `duplicate`, an object's first key is repeated in front with
    /// another value, so the later copy must win.
    fn document_text(doc: &Value, duplicate: bool) -> String {
        let body = serde_json::to_string(doc).unwrap();
        match doc.as_object().and_then(|o| o.keys().next()) {
            Some(key) if duplicate => {
                let key = serde_json::to_string(key).unwrap();
                format!("{{{key}:[7],{}", &body[1..])
            }
            _ => body,
        }
    }

    /// Each pointer's answer from one pass equals its answer alone, in the caller's order.
    fn same_in_one_pass(body: &str, pointers: &[&str]) {
        let one_pass = pointer_values(body.as_bytes(), pointers).map_err(|_| ());
        let each: Result<Vec<_>, ()> = pointers
            .iter()
            .map(|p| by_tree(body.as_bytes(), p))
            .collect();
        assert_eq!(one_pass, each, "body {body:?}, pointers {pointers:?}");
    }

    #[test]
    fn reads_several_pointers_in_one_pass() {
        let body = r#"{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1",
            "lines":[{"n":7},{"n":-3}]}},"id":"evt_2"}"#;
        same_in_one_pass(body, &["/id", "/type"]);
        same_in_one_pass(body, &["/type", "/id", "/data/object/id", "/missing"]);
        same_in_one_pass(
            body,
            &["/data/object/lines/1/n", "/data/object/lines/0/n", "/data"],
        );
        same_in_one_pass(body, &["", "/id", "id", "/data/object/lines/01"]);
        same_in_one_pass(body, &["/id", "/id"]);
        same_in_one_pass(body, &[]);
        // More pointers than one pass's mask holds.
        let many: Vec<String> = (0..70)
            .map(|i| format!("/data/object/lines/{}/n", i % 3))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        same_in_one_pass(body, &many);
        for bad in ["{", r#"{"id":"x",}"#, ""] {
            assert!(
                pointer_values(bad.as_bytes(), &["/id", "/type"]).is_err(),
                "{bad:?}"
            );
            assert!(pointer_values(bad.as_bytes(), &[]).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn any_document_several_pointers(
            doc in json_value(),
            paths in prop::collection::vec(prop::collection::vec("[a-c0-2/~+]{0,2}", 0..4), 0..4),
            duplicate in any::<bool>(),
        ) {
            let body = document_text(&doc, duplicate);
            let pointers: Vec<String> = paths
                .iter()
                .map(|path| path.iter().map(|t| format!("/{t}")).collect())
                .collect();
            let pointers: Vec<&str> = pointers.iter().map(String::as_str).collect();
            same_in_one_pass(&body, &pointers);
        }

        #[test]
        fn any_document_any_pointer(
            doc in json_value(),
            path in prop::collection::vec("[a-c0-2/~+]{0,2}", 0..4),
            duplicate in any::<bool>(),
        ) {
            let body = document_text(&doc, duplicate);
            let pointer: String = path.iter().map(|t| format!("/{t}")).collect();
            same(&body, &pointer);
        }
    }
}
