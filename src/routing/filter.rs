//! The route filter language: a JSON filter matched against a JSON body, or against a
//! request's headers, in the style of Hookdeck's filters (docs/ROUTING.md). A filter is
//! compiled once, when the configuration is loaded, so a mistake is reported by
//! `hookgate check` with the path of the bad key, and matching a request neither parses nor
//! validates anything. Compiling is in `compile.rs`, matching in `eval.rs`.

use serde_json::map::Entry;
use serde_json::{Map, Value};

use super::compile::{compile, Level};

/// How deeply a filter's JSON objects and arrays may nest. Matching recurses along the
/// compiled filter, never along the document, so this also bounds the matcher's stack.
pub const MAX_FILTER_DEPTH: usize = 32;

/// How many JSON values (objects, arrays, operators' arguments and every literal) a filter may
/// hold. With the depth bound it keeps the cost of matching one document in proportion to the
/// document's size.
pub const MAX_FILTER_NODES: usize = 4096;

/// Why a filter does not compile, and where: `match.data.amount: $gt takes a number or a
/// string, not an array`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct FilterError {
    /// The key inside the filter, from `match` or `match_headers`: `match.data.$or[1].type`.
    pub path: String,
    pub reason: String,
}

/// A compiled filter. [`Filter::compile`] reads a body filter (`match`),
/// [`Filter::compile_headers`] a header filter (`match_headers`).
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    pub(super) root: Node,
}

/// One position in a compiled filter.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    /// A string, number, boolean or null: the value equals it, or the value is an array with
    /// an equal element.
    Scalar(Value),
    /// An array: the value is an array, and each item matches one of its elements.
    All(Vec<Node>),
    /// An object with at least one field name (or none at all: `{}`): the value is an object
    /// that has the fields and satisfies the operators, or an array with such an element.
    Object {
        fields: Vec<(String, Node)>,
        ops: Vec<Op>,
    },
    /// An object of operators only: each applies to the value itself.
    Ops(Vec<Op>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cmp {
    Gt,
    Gte,
    Lt,
    Lte,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Op {
    Eq(Value),
    Neq(Value),
    /// The bound is a number or a string.
    Cmp(Cmp, Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    /// `$in` with a string: a substring.
    Contains(String),
    /// `$nin` with a string.
    NotContains(String),
    StartsWith(String),
    EndsWith(String),
    Exist(bool),
    Or(Vec<Node>),
    And(Vec<Node>),
    Not(Box<Node>),
}

impl Filter {
    /// Compiles a body filter (a route's `match`). Errors name the path from `match`.
    pub fn compile(filter: &Value) -> Result<Self, FilterError> {
        let root = compile(filter, Level::Body)?;
        Ok(Self { root })
    }

    /// Compiles a header filter (a route's `match_headers`): an object of header names, which
    /// are case-insensitive, each holding a filter on the header's value, a string. `$or`,
    /// `$and` and `$not` may combine such objects. Errors name the path from `match_headers`.
    pub fn compile_headers(filter: &Value) -> Result<Self, FilterError> {
        let root = compile(filter, Level::HeaderNames)?;
        Ok(Self { root })
    }

    /// Whether a JSON document matches.
    pub fn matches(&self, document: &Value) -> bool {
        self.root.eval(Some(document))
    }

    /// Whether a request's headers match a filter from [`Filter::compile_headers`]. A header
    /// sent once is a string; a header sent more than once is an array of its values in order,
    /// so a plain value matches any of them.
    pub fn matches_headers(&self, headers: &[(String, String)]) -> bool {
        self.matches_header_pairs(headers.iter().map(|(n, v)| (n.as_str(), v.as_str())))
    }

    /// [`Filter::matches_headers`] over borrowed pairs, as a request holds them.
    pub fn matches_header_pairs<'a>(
        &self,
        headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> bool {
        let mut map = Map::new();
        for (name, value) in headers {
            let value = Value::String(value.to_owned());
            match map.entry(name.to_ascii_lowercase()) {
                Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                Entry::Occupied(mut slot) => match slot.get_mut() {
                    Value::Array(values) => values.push(value),
                    first => *first = Value::Array(vec![first.take(), value]),
                },
            }
        }
        self.matches(&Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn repeated_headers_become_an_array_in_order() {
        let filter = Filter::compile_headers(&json!({"x-a": {"$eq": ["1", "2", "3"]}})).unwrap();
        let sent = |pairs: &[(&str, &str)]| {
            let pairs: Vec<(String, String)> = pairs
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect();
            filter.matches_headers(&pairs)
        };
        assert!(sent(&[
            ("X-A", "1"),
            ("x-b", "0"),
            ("x-A", "2"),
            ("x-a", "3")
        ]));
        assert!(!sent(&[("X-A", "2"), ("x-a", "1"), ("x-a", "3")]));
        assert!(!sent(&[("x-a", "1"), ("x-a", "2")]));
    }

    #[test]
    fn errors_read_as_path_then_reason() {
        let err = Filter::compile(&json!({"data": {"amount": {"$gt": [1]}}})).unwrap_err();
        assert_eq!(err.path, "match.data.amount");
        assert_eq!(err.reason, "$gt takes a number or a string, not an array");
        assert_eq!(
            err.to_string(),
            "match.data.amount: $gt takes a number or a string, not an array"
        );
    }
}
