//! Matching a document against a compiled filter. Recursion follows the filter (one level per
//! call, bounded by `MAX_FILTER_DEPTH` at compile time); a document's arrays are looked into
//! one level at a time by loops, so no document, however deep, deepens the stack.

use std::cmp::Ordering;

use serde_json::{Number, Value};

use super::filter::{Cmp, Node, Op};

impl Node {
    /// Whether the value at this position matches; `None` is a field the document lacks.
    pub(super) fn eval(&self, value: Option<&Value>) -> bool {
        match self {
            Node::Scalar(expected) => any_element(value, |v| scalar_eq(expected, v)),
            Node::All(items) => match value {
                Some(Value::Array(elements)) => items
                    .iter()
                    .all(|item| elements.iter().any(|e| item.eval(Some(e)))),
                _ => false,
            },
            Node::Object { fields, ops } => {
                let one = |v: &Value| match v {
                    Value::Object(map) => {
                        fields.iter().all(|(name, node)| node.eval(map.get(name)))
                            && ops.iter().all(|op| op.eval(Some(v)))
                    }
                    _ => false,
                };
                match value {
                    Some(Value::Array(elements)) => elements.iter().any(one),
                    Some(v) => one(v),
                    None => false,
                }
            }
            Node::Ops(ops) => ops.iter().all(|op| op.eval(value)),
        }
    }
}

impl Op {
    fn eval(&self, value: Option<&Value>) -> bool {
        match self {
            Op::Eq(expected) => value.is_some_and(|v| deep_eq(expected, v)),
            Op::Neq(expected) => !value.is_some_and(|v| deep_eq(expected, v)),
            Op::Cmp(cmp, bound) => any_element(value, |v| {
                compare(v, bound).is_some_and(|order| match cmp {
                    Cmp::Gt => order == Ordering::Greater,
                    Cmp::Gte => order != Ordering::Less,
                    Cmp::Lt => order == Ordering::Less,
                    Cmp::Lte => order != Ordering::Greater,
                })
            }),
            Op::In(list) => value.is_some_and(|v| in_list(list, v)),
            Op::Nin(list) => !value.is_some_and(|v| in_list(list, v)),
            Op::Contains(part) => any_string(value, |s| s.contains(part.as_str())),
            Op::NotContains(part) => !any_string(value, |s| s.contains(part.as_str())),
            Op::StartsWith(prefix) => any_string(value, |s| s.starts_with(prefix.as_str())),
            Op::EndsWith(suffix) => any_string(value, |s| s.ends_with(suffix.as_str())),
            Op::Exist(wanted) => value.is_some() == *wanted,
            Op::Or(nodes) => nodes.iter().any(|n| n.eval(value)),
            Op::And(nodes) => nodes.iter().all(|n| n.eval(value)),
            Op::Not(node) => !node.eval(value),
        }
    }
}

/// A test of one value, applied to the value, or to each element of an array value (one level
/// down) until one passes. A missing field passes nothing.
fn any_element(value: Option<&Value>, test: impl Fn(&Value) -> bool) -> bool {
    match value {
        None => false,
        Some(Value::Array(elements)) => elements.iter().any(test),
        Some(v) => test(v),
    }
}

fn any_string(value: Option<&Value>, test: impl Fn(&str) -> bool) -> bool {
    any_element(value, |v| v.as_str().is_some_and(&test))
}

/// `$in`: the value is one of the list, or an array value has an element that is.
fn in_list(list: &[Value], value: &Value) -> bool {
    let listed = |v: &Value| list.iter().any(|item| deep_eq(item, v));
    listed(value)
        || match value {
            Value::Array(elements) => elements.iter().any(listed),
            _ => false,
        }
}

fn scalar_eq(expected: &Value, value: &Value) -> bool {
    match (expected, value) {
        (Value::Number(a), Value::Number(b)) => number_cmp(a, b) == Some(Ordering::Equal),
        (Value::Array(_) | Value::Object(_), _) => false,
        _ => expected == value,
    }
}

/// Equality of JSON values with numbers compared by value (`1` equals `1.0`) and objects
/// regardless of key order. It recurses only where `expected`, a filter literal bounded at
/// compile time, has children.
pub(super) fn deep_eq(expected: &Value, value: &Value) -> bool {
    match (expected, value) {
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| deep_eq(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(key, x)| b.get(key).is_some_and(|y| deep_eq(x, y)))
        }
        _ => scalar_eq(expected, value),
    }
}

/// The order of a value against a comparison bound: numbers by value, strings by code point
/// (so ISO 8601 timestamps in one format order by time); other pairs are not ordered.
fn compare(value: &Value, bound: &Value) -> Option<Ordering> {
    match (value, bound) {
        (Value::Number(a), Value::Number(b)) => number_cmp(a, b),
        (Value::String(a), Value::String(b)) => Some(a.as_str().cmp(b.as_str())),
        _ => None,
    }
}

/// Integers compare exactly (a `u64` above `i64::MAX` included); anything with a fraction or
/// exponent compares as `f64`.
fn number_cmp(a: &Number, b: &Number) -> Option<Ordering> {
    fn int(n: &Number) -> Option<i128> {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    }
    match (int(a), int(b)) {
        (Some(x), Some(y)) => Some(x.cmp(&y)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn n(v: Value) -> Number {
        match v {
            Value::Number(n) => n,
            other => panic!("{other} is not a number"),
        }
    }

    #[test]
    fn numbers_compare_by_value_across_representations() {
        let cmp = |a, b| number_cmp(&n(a), &n(b));
        assert_eq!(cmp(json!(1), json!(1.0)), Some(Ordering::Equal));
        assert_eq!(cmp(json!(-1), json!(u64::MAX)), Some(Ordering::Less));
        assert_eq!(
            cmp(json!(u64::MAX), json!(i64::MAX)),
            Some(Ordering::Greater)
        );
        assert_eq!(cmp(json!(2.5), json!(2)), Some(Ordering::Greater));
        assert_eq!(cmp(json!(-0.0), json!(0)), Some(Ordering::Equal));
    }

    #[test]
    fn deep_equality_ignores_key_order_and_number_form() {
        assert!(deep_eq(
            &json!({"a": [1, {"b": 2.0}]}),
            &json!({"a": [1.0, {"b": 2}]})
        ));
        assert!(!deep_eq(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
        assert!(!deep_eq(&json!({"a": 1, "b": 2}), &json!({"a": 1, "c": 2})));
        assert!(!deep_eq(&json!([1, 2]), &json!([2, 1])));
        assert!(!deep_eq(&json!(null), &json!(false)));
        assert!(!deep_eq(&json!("1"), &json!(1)));
    }

    #[test]
    fn in_lists_see_the_array_itself_and_its_elements() {
        let list = [json!([1, 2]), json!("a")];
        assert!(in_list(&list, &json!([1, 2])));
        assert!(in_list(&list, &json!(["b", "a"])));
        assert!(!in_list(&list, &json!([[1], 2])));
        assert!(!in_list(&list, &json!("b")));
    }
}
