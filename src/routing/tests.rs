//! The filter language's rules, one test per rule; docs/ROUTING.md's examples are checked
//! separately (`doc_examples.rs`).

use serde_json::{json, Value};

use super::{Filter, MAX_FILTER_DEPTH, MAX_FILTER_NODES};

fn matches(filter: Value, document: Value) -> bool {
    Filter::compile(&filter)
        .unwrap_or_else(|e| panic!("{e}"))
        .matches(&document)
}

fn compile_error(filter: Value) -> String {
    Filter::compile(&filter).unwrap_err().to_string()
}

fn header_error(filter: Value) -> String {
    Filter::compile_headers(&filter).unwrap_err().to_string()
}

fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn scalars_match_equal_values_with_numbers_by_value() {
    assert!(matches(json!(1), json!(1.0)));
    assert!(matches(json!({"n": 2.5}), json!({"n": 2.5})));
    assert!(matches(json!({"n": u64::MAX}), json!({"n": u64::MAX})));
    assert!(!matches(json!({"n": u64::MAX}), json!({"n": -1})));
    assert!(!matches(json!({"n": 1}), json!({"n": "1"})));
    assert!(!matches(json!({"b": true}), json!({"b": "true"})));
    assert!(!matches(json!({"s": "A"}), json!({"s": "a"})));
    assert!(matches(json!(null), json!(null)));
    assert!(!matches(json!({"x": null}), json!({})));
}

#[test]
fn objects_match_by_subset_and_arrays_by_containment() {
    let doc = json!({"a": {"b": {"c": 1, "d": 2}, "e": [1, 2, {"f": 3, "g": 4}]}});
    assert!(matches(json!({}), doc.clone()));
    assert!(matches(json!({"a": {"b": {"c": 1}}}), doc.clone()));
    assert!(matches(json!({"a": {"e": 2}}), doc.clone()));
    assert!(matches(json!({"a": {"e": [2, 1]}}), doc.clone()));
    assert!(matches(json!({"a": {"e": {"f": 3}}}), doc.clone()));
    assert!(matches(json!({"a": {"e": [{"g": 4}, 1]}}), doc.clone()));
    assert!(!matches(json!({"a": {"e": 5}}), doc.clone()));
    assert!(!matches(json!({"a": {"e": [1, 5]}}), doc.clone()));
    assert!(!matches(json!({"a": {"b": {"c": 2}}}), doc.clone()));
    assert!(!matches(json!({"a": {"b": 1}}), doc.clone()));
    // One object filter, one element: the fields may not come from two elements.
    assert!(!matches(
        json!({"i": {"x": 1, "y": 2}}),
        json!({"i": [{"x": 1}, {"y": 2}]})
    ));
    // One array level at a time.
    assert!(!matches(json!({"a": 1}), json!({"a": [[1]]})));
    assert!(matches(json!({"a": [[1]]}), json!({"a": [[1, 2]]})));
    // An array filter needs an array.
    assert!(!matches(json!({"a": [1]}), json!({"a": 1})));
    assert!(matches(json!({"a": []}), json!({"a": []})));
    assert!(!matches(json!({}), json!("not an object")));
}

#[test]
fn eq_and_neq_compare_exactly() {
    assert!(matches(
        json!({"a": {"$eq": [1, {"b": 2}]}}),
        json!({"a": [1.0, {"b": 2}]})
    ));
    assert!(!matches(json!({"a": {"$eq": [1]}}), json!({"a": [1, 2]})));
    assert!(!matches(
        json!({"a": {"$eq": {"b": 2}}}),
        json!({"a": {"b": 2, "c": 3}})
    ));
    assert!(!matches(json!({"a": {"$eq": 1}}), json!({"a": [1]})));
    assert!(!matches(json!({"a": {"$eq": null}}), json!({})));
    assert!(matches(json!({"a": {"$neq": null}}), json!({})));
    assert!(matches(json!({"a": {"$neq": 1}}), json!({"a": [1]})));
    assert!(!matches(json!({"a": {"$neq": 1}}), json!({"a": 1.0})));
}

#[test]
fn comparisons_order_numbers_and_strings_and_nothing_else() {
    let cases = [
        (json!({"$gt": 1}), json!(2), true),
        (json!({"$gt": 1}), json!(1), false),
        (json!({"$gte": 1}), json!(1.0), true),
        (json!({"$lt": 0}), json!(-0.5), true),
        (json!({"$lte": -1}), json!(-1), true),
        (json!({"$lt": u64::MAX}), json!(i64::MIN), true),
        (json!({"$gt": 1.5}), json!(2), true),
        (json!({"$gt": "b"}), json!("ba"), true),
        (json!({"$lt": "b"}), json!("B"), true),
        (json!({"$gt": 1}), json!("2"), false),
        (json!({"$gt": "1"}), json!(2), false),
        (json!({"$lt": 1}), json!(null), false),
        (json!({"$lt": 1}), json!(true), false),
        (json!({"$gt": 5}), json!([1, 7]), true),
        (json!({"$gt": 5}), json!([1, 2]), false),
    ];
    for (filter, value, expected) in cases {
        let f = json!({ "v": filter });
        let d = json!({ "v": value });
        assert_eq!(matches(f.clone(), d.clone()), expected, "{f} on {d}");
    }
    assert!(!matches(json!({"v": {"$gt": 1}}), json!({})));
}

#[test]
fn in_and_nin() {
    assert!(matches(json!({"v": {"$in": [1, "a"]}}), json!({"v": 1.0})));
    assert!(matches(
        json!({"v": {"$in": [[1, 2]]}}),
        json!({"v": [1, 2]})
    ));
    assert!(matches(
        json!({"v": {"$in": ["x", "a"]}}),
        json!({"v": ["b", "a"]})
    ));
    assert!(!matches(
        json!({"v": {"$in": ["x"]}}),
        json!({"v": ["b", "a"]})
    ));
    assert!(!matches(json!({"v": {"$in": ["x"]}}), json!({})));
    assert!(matches(json!({"v": {"$nin": ["x"]}}), json!({})));
    assert!(!matches(
        json!({"v": {"$nin": ["a"]}}),
        json!({"v": ["b", "a"]})
    ));
    assert!(matches(json!({"v": {"$in": "ell"}}), json!({"v": "hello"})));
    assert!(matches(
        json!({"v": {"$in": "ell"}}),
        json!({"v": ["x", "yellow"]})
    ));
    assert!(!matches(json!({"v": {"$in": "ell"}}), json!({"v": 7})));
    assert!(matches(
        json!({"v": {"$nin": "ell"}}),
        json!({"v": "world"})
    ));
    assert!(matches(json!({"v": {"$nin": "ell"}}), json!({})));
}

#[test]
fn prefixes_suffixes_and_existence() {
    assert!(matches(
        json!({"v": {"$startsWith": ""}}),
        json!({"v": "x"})
    ));
    assert!(!matches(json!({"v": {"$startsWith": ""}}), json!({"v": 1})));
    assert!(matches(
        json!({"v": {"$endsWith": "é"}}),
        json!({"v": ["a", "café"]})
    ));
    assert!(matches(json!({"v": {"$exist": true}}), json!({"v": null})));
    assert!(!matches(json!({"v": {"$exist": true}}), json!({})));
    assert!(matches(json!({"v": {"$exist": false}}), json!({})));
    assert!(matches(json!({"$exist": true}), json!(0)));
    // `$exist` inside an array element filter: some element has the field.
    assert!(matches(
        json!({"i": {"id": {"$exist": true}}}),
        json!({"i": [{}, {"id": 1}]})
    ));
}

#[test]
fn logic_combines_filters_at_the_same_place() {
    let f = json!({"$or": [{"a": 1}, {"b": {"$gt": 1}}], "c": {"$not": {"$in": [0]}}});
    assert!(matches(f.clone(), json!({"a": 1, "c": 1})));
    assert!(matches(f.clone(), json!({"b": 2})));
    assert!(!matches(f.clone(), json!({"b": 2, "c": 0})));
    assert!(!matches(f, json!({"a": 2, "b": 1})));
    assert!(matches(
        json!({"$and": [{"a": 1}, {"b": 2}]}),
        json!({"a": 1, "b": 2})
    ));
    assert!(!matches(
        json!({"$and": [{"a": 1}, {"b": 2}]}),
        json!({"a": 1})
    ));
    assert!(matches(json!({"$not": {"a": 1}}), json!({})));
    assert!(matches(
        json!({"$not": {"$not": {"a": 1}}}),
        json!({"a": 1})
    ));
    // Operators with fields apply to the same element of an array.
    let f = json!({"i": {"sku": "A", "$not": {"qty": 0}}});
    assert!(matches(
        f.clone(),
        json!({"i": [{"sku": "B"}, {"sku": "A", "qty": 1}]})
    ));
    assert!(!matches(
        f,
        json!({"i": [{"sku": "B", "qty": 1}, {"sku": "A", "qty": 0}]})
    ));
}

#[test]
fn compile_errors_name_the_path_and_the_reason() {
    let cases = [
        (json!({"a": {"$gt": {}}}), "match.a: $gt takes a number or a string, not an object"),
        (json!({"a": {"$in": []}}), "match.a: $in takes a non-empty array"),
        (json!({"a": {"$nin": 3}}), "match.a: $nin takes an array of values or a string, not a number"),
        (json!({"a": {"$startsWith": null}}), "match.a: $startsWith takes a string, not null"),
        (json!({"a": {"$endsWith": ["x"]}}), "match.a: $endsWith takes a string, not an array"),
        (json!({"$and": {}}), "match: $and takes a non-empty array of filters, not an object"),
        (json!({"$not": {"$exist": 1}}), "match.$not: $exist takes true or false, not a number"),
        (json!([{"a.b": {"$lte": true}}]), "match[0][\"a.b\"]: $lte takes a number or a string, not a boolean"),
        (json!({"a": {"$x": 1}}), "match.a: unknown operator $x (the operators are $eq, $neq, $gt, $gte, $lt, $lte, $in, $nin, $startsWith, $endsWith, $exist, $or, $and, $not)"),
    ];
    for (filter, message) in cases {
        assert_eq!(compile_error(filter), message);
    }
    // An operator's literal argument is data: `$` keys in it are compared, not run.
    assert!(matches(
        json!({"a": {"$in": [{"$x": 1}]}}),
        json!({"a": {"$x": 1}})
    ));
    assert!(compile_error(json!({"a": {"$EQ": 1}})).starts_with("match.a: unknown operator $EQ"));
}

#[test]
fn depth_and_size_are_bounded_at_compile_time() {
    let mut deep = json!(1);
    for _ in 1..MAX_FILTER_DEPTH {
        deep = json!({ "a": deep });
    }
    assert!(Filter::compile(&deep).is_ok());
    let deeper = json!({ "a": deep.clone() });
    assert!(compile_error(deeper).ends_with("nests deeper than 32 levels"));
    // Operators and literals count too.
    let mut nots = json!({"$eq": 1});
    for _ in 0..MAX_FILTER_DEPTH {
        nots = json!({ "$not": nots });
    }
    assert!(compile_error(nots).contains("nests deeper than 32 levels"));
    let mut literal = json!(1);
    for _ in 0..MAX_FILTER_DEPTH {
        literal = json!([literal]);
    }
    assert!(compile_error(json!({"$eq": literal})).contains("nests deeper"));
    let wide = Value::Array(vec![json!(1); MAX_FILTER_NODES]);
    assert!(compile_error(wide).ends_with("holds more than 4096 values"));
    let wide = Value::Array(vec![json!(1); MAX_FILTER_NODES - 1]);
    assert!(Filter::compile(&wide).is_ok());
    // A document deeper than any filter is matched without recursing into it.
    let mut doc = json!(1);
    for _ in 0..100_000 {
        doc = Value::Array(vec![doc]);
    }
    let results = [
        Filter::compile(&json!({"a": 1})).unwrap().matches(&doc),
        Filter::compile(&json!([[[[]]]])).unwrap().matches(&doc),
        Filter::compile(&json!([[[[1]]]])).unwrap().matches(&doc),
    ];
    // serde_json drops nested values recursively: take the document apart by a loop.
    while let Value::Array(mut items) = doc {
        doc = items.pop().unwrap_or(Value::Null);
    }
    assert_eq!(results, [false, true, false]);
}

#[test]
fn header_names_are_case_insensitive_and_values_strings() {
    let f = Filter::compile_headers(&json!({"X-Event": "push", "x-id": {"$exist": true}})).unwrap();
    assert!(f.matches_headers(&headers(&[("x-event", "push"), ("X-ID", "1")])));
    assert!(f.matches_headers(&headers(&[("X-EVENT", "push"), ("x-Id", "")])));
    assert!(!f.matches_headers(&headers(&[("x-event", "Push"), ("x-id", "1")])));
    assert!(!f.matches_headers(&headers(&[("x-event", "push")])));
    let f = Filter::compile_headers(&json!({"$not": {"X-Test": "true"}})).unwrap();
    assert!(f.matches_headers(&[]));
    assert!(!f.matches_headers(&headers(&[("x-test", "true")])));
    let f = Filter::compile_headers(&json!({"x-tag": {"$eq": ["a", "b"]}})).unwrap();
    assert!(f.matches_headers(&headers(&[("X-Tag", "a"), ("x-tag", "b")])));
    assert!(!f.matches_headers(&headers(&[("X-Tag", "a")])));
    assert!(Filter::compile_headers(&json!({}))
        .unwrap()
        .matches_headers(&[]));
}

#[test]
fn header_filter_errors() {
    let cases = [
        (json!([]), "match_headers: takes an object of header names, not an array"),
        (json!("x"), "match_headers: takes an object of header names, not a string"),
        (json!({"X-A": "1", "x-a": "2"}), ""),
        (json!({"x-a": {"b": "c"}}), "match_headers.x-a.b: header values are strings, which have no fields"),
        (json!({"x-a": {}}), "match_headers.x-a: header values are strings; {} never matches one"),
        (json!({"x-a": {"$gt": 1}}), "match_headers.x-a: header values are strings, so a number never matches one; quote it: \"1\""),
        (json!({"x-a": {"$in": ["a", true]}}), "match_headers.x-a.$in[1]: header values are strings, so a boolean never matches one; quote it: \"true\""),
        (json!({"x-a": {"$eq": {"k": "v"}}}), "match_headers.x-a.$eq: header values are strings, not objects"),
        (json!({"$or": [{"x-a": null}]}), "match_headers.$or[0].x-a: header values are strings, so null never matches one; quote it: \"null\""),
        (json!({"$exist": true}), "match_headers: $exist applies to a header's value; put it under a header name"),
    ];
    for (filter, message) in cases {
        let got = header_error(filter);
        if message.is_empty() {
            assert!(got.contains("names header \"x-a\" twice"), "{got}");
        } else {
            assert_eq!(got, message);
        }
    }
}
