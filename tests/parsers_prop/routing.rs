//! Route filters and event-type patterns (docs/ROUTING.md): no filter, however malformed,
//! panics the compiler; the logical operators are the negation, conjunction and disjunction
//! of their parts on every document; every sub-object of a document matches it; and patterns
//! agree with an independent, backtracking reading of `*`.

use hookgate::routing::{EventTypePattern, Filter};
use serde_json::{json, Map, Value};

use crate::common::*;

// ---------------------------------------------------------------------------------------
// Event-type patterns.

/// `*` read by backtracking over characters: the textbook definition, sharing nothing with
/// the literal-run scan in `src/routing/glob.rs`.
fn glob_reference(pattern: &[char], text: &[char]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some(('*', rest)) => (0..=text.len()).any(|skip| glob_reference(rest, &text[skip..])),
        Some((c, rest)) => text.first() == Some(c) && glob_reference(rest, &text[1..]),
    }
}

fn reference_matches(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    glob_reference(&p, &t)
}

// ---------------------------------------------------------------------------------------
// JSON documents and filters.

/// Field names shared by documents and filters, so that filters often meet their fields.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(vec!["a", "b", "c", "type", "x-id"]).prop_map(str::to_owned),
        1 => "[a-z.]{0,3}",
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..4).prop_map(Value::from),
        select(vec![0.0, 1.0, 1.5, -2.25]).prop_map(Value::from),
        select(vec!["", "a", "b", "ab", "ba", "é"]).prop_map(Value::from),
    ]
}

fn document() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 48, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(key(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn string() -> impl Strategy<Value = Value> {
    select(vec!["", "a", "b", "ab"]).prop_map(Value::from)
}

/// Valid filters over the documents above, every operator included.
fn filter() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        4 => scalar(),
        1 => (select(vec!["$eq", "$neq"]), document()).prop_map(|(op, v)| json!({ op: v })),
        1 => (select(vec!["$gt", "$gte", "$lt", "$lte"]), prop_oneof![(-3i64..4).prop_map(Value::from), string()])
            .prop_map(|(op, v)| json!({ op: v })),
        1 => (select(vec!["$in", "$nin"]), prop_oneof![
                proptest::collection::vec(scalar(), 1..4).prop_map(Value::Array),
                string(),
            ])
            .prop_map(|(op, v)| json!({ op: v })),
        1 => (select(vec!["$startsWith", "$endsWith"]), string()).prop_map(|(op, v)| json!({ op: v })),
        1 => any::<bool>().prop_map(|b| json!({ "$exist": b })),
    ];
    leaf.prop_recursive(4, 32, 3, |inner| {
        prop_oneof![
            3 => proptest::collection::btree_map(key(), inner.clone(), 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            1 => proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            1 => (select(vec!["$or", "$and"]), proptest::collection::vec(inner.clone(), 1..3))
                .prop_map(|(op, v)| json!({ op: v })),
            1 => inner.clone().prop_map(|f| json!({ "$not": f })),
            1 => (key(), inner.clone(), inner).prop_map(|(k, f, g)| json!({ k: f, "$not": g })),
        ]
    })
}

/// Any JSON at all, with operator keys (known, misspelt and made up) among the field names.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ];
    let name = prop_oneof![
        select(vec![
            "$eq",
            "$neq",
            "$gt",
            "$gte",
            "$lt",
            "$lte",
            "$in",
            "$nin",
            "$startsWith",
            "$endsWith",
            "$exist",
            "$or",
            "$and",
            "$not",
            "$ref",
            "$",
            "$EQ",
            "a",
            "X-A",
            "x-a",
        ])
        .prop_map(str::to_owned),
        any::<String>(),
    ];
    leaf.prop_recursive(6, 64, 5, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::btree_map(name.clone(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A random sub-document: some fields of each object and some elements of each array, each
/// pruned the same way. A small xorshift on `seed` makes the choices.
fn prune(value: &Value, seed: &mut u64) -> Value {
    let mut keep = || {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        !(*seed).is_multiple_of(3)
    };
    match value {
        Value::Object(map) => {
            let kept: Vec<(&String, &Value)> = map.iter().filter(|_| keep()).collect();
            let pruned: Map<String, Value> = kept
                .into_iter()
                .map(|(k, v)| (k.clone(), prune(v, seed)))
                .collect();
            Value::Object(pruned)
        }
        Value::Array(items) => {
            let kept: Vec<&Value> = items.iter().filter(|_| keep()).collect();
            Value::Array(kept.into_iter().map(|v| prune(v, seed)).collect())
        }
        scalar => scalar.clone(),
    }
}

fn compiled(filter: &Value) -> Filter {
    Filter::compile(filter).unwrap_or_else(|e| panic!("{filter} does not compile: {e}"))
}

fn header_name() -> impl Strategy<Value = String> {
    select(vec!["x-a", "X-A", "x-B", "Content-Type"]).prop_map(str::to_owned)
}

fn flip_case(name: &str, mask: u64) -> String {
    name.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 64) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn globs_agree_with_the_backtracking_reference(
        pattern in "[ab.*é]{1,8}",
        text in "[ab.é]{0,10}",
    ) {
        let parsed = EventTypePattern::parse(&pattern).unwrap();
        prop_assert_eq!(parsed.matches(&text), reference_matches(&pattern, &text));
    }

    #[test]
    fn a_glob_matches_itself_with_its_stars_filled_in(
        pattern in "[a.*]{1,8}",
        fills in proptest::collection::vec("[a.*]{0,3}", 8),
    ) {
        let mut fill = fills.iter();
        let text: String = pattern
            .chars()
            .map(|c| if c == '*' { fill.next().unwrap().clone() } else { c.to_string() })
            .collect();
        prop_assert!(EventTypePattern::parse(&pattern).unwrap().matches(&text), "{} on {}", pattern, text);
    }

    #[test]
    fn any_pattern_parses_unless_empty_and_matching_never_panics(pattern in any::<String>(), text in any::<String>()) {
        match EventTypePattern::parse(&pattern) {
            Ok(parsed) => {
                prop_assert!(!pattern.is_empty());
                prop_assert_eq!(parsed.matches(&text), reference_matches(&pattern, &text));
                prop_assert!(parsed.matches(&pattern.replace('*', "")));
            }
            Err(message) => {
                prop_assert!(pattern.is_empty());
                prop_assert!(!message.is_empty());
            }
        }
    }

    #[test]
    fn compiling_any_json_never_panics(filter in any_json(), document in any_json()) {
        for (compiled, root) in [
            (Filter::compile(&filter), "match"),
            (Filter::compile_headers(&filter), "match_headers"),
        ] {
            match compiled {
                Ok(f) => {
                    f.matches(&document);
                    f.matches_headers(&[("X-A".to_owned(), "1".to_owned())]);
                }
                Err(e) => {
                    prop_assert!(e.path.starts_with(root), "{}", e);
                    prop_assert!(!e.reason.is_empty());
                }
            }
        }
    }

    #[test]
    fn not_is_negation(filter in filter(), document in document()) {
        let positive = compiled(&filter).matches(&document);
        prop_assert_eq!(compiled(&json!({ "$not": filter })).matches(&document), !positive);
    }

    #[test]
    fn and_or_are_conjunction_and_disjunction(
        filters in proptest::collection::vec(filter(), 1..4),
        document in document(),
    ) {
        let each: Vec<bool> = filters.iter().map(|f| compiled(f).matches(&document)).collect();
        let all = compiled(&json!({ "$and": filters })).matches(&document);
        let any = compiled(&json!({ "$or": filters })).matches(&document);
        prop_assert_eq!(all, each.iter().all(|b| *b));
        prop_assert_eq!(any, each.iter().any(|b| *b));
    }

    #[test]
    fn operators_and_fields_in_one_object_are_a_conjunction(
        fields in proptest::collection::btree_map(key(), filter(), 0..3),
        negated in filter(),
        document in proptest::collection::btree_map(key(), document(), 0..4),
    ) {
        // `{f..., "$not": g}` on an object is `{f...}` and not `g`.
        let fields: Map<String, Value> = fields.into_iter().collect();
        let document = Value::Object(document.into_iter().collect());
        let mut both = fields.clone();
        both.insert("$not".to_owned(), negated.clone());
        let expected = compiled(&Value::Object(fields)).matches(&document)
            && !compiled(&negated).matches(&document);
        prop_assert_eq!(compiled(&Value::Object(both)).matches(&document), expected);
    }

    #[test]
    fn every_sub_document_matches_its_document(document in document(), seed in any::<u64>()) {
        let mut seed = seed | 1;
        let sub = prune(&document, &mut seed);
        prop_assert!(compiled(&sub).matches(&document), "{} in {}", sub, document);
        prop_assert!(compiled(&document).matches(&document));
        let equal = json!({ "$eq": document });
        let unequal = json!({ "$neq": document });
        prop_assert!(compiled(&equal).matches(&document));
        prop_assert!(!compiled(&unequal).matches(&document));
    }

    #[test]
    fn a_sub_object_of_one_element_matches_the_array(
        elements in proptest::collection::vec(
            proptest::collection::btree_map(key(), document(), 0..4),
            1..4,
        ),
        pick in any::<prop::sample::Index>(),
        seed in any::<u64>(),
    ) {
        let elements: Vec<Value> = elements
            .into_iter()
            .map(|m| Value::Object(m.into_iter().collect()))
            .collect();
        let mut seed = seed | 1;
        let sub = prune(&elements[pick.index(elements.len())], &mut seed);
        let document = json!({ "items": elements });
        let filter = json!({ "items": sub });
        prop_assert!(compiled(&filter).matches(&document), "{} in {}", filter, document);
    }

    #[test]
    fn header_names_match_in_any_case(
        wanted in proptest::collection::btree_map(header_name(), select(vec!["1", "2"]), 1..3),
        sent in proptest::collection::vec((header_name(), select(vec!["1", "2"])), 0..4),
        mask in any::<u64>(),
    ) {
        let filter = Value::Object(wanted.iter().map(|(k, v)| (k.clone(), Value::from(*v))).collect());
        let Ok(filter) = Filter::compile_headers(&filter) else {
            // Two spellings of one name in the filter: refused, as documented.
            let lower: std::collections::BTreeSet<String> = wanted.keys().map(|k| k.to_ascii_lowercase()).collect();
            prop_assert!(lower.len() < wanted.len());
            return Ok(());
        };
        let sent: Vec<(String, String)> = sent.into_iter().map(|(n, v)| (n, v.to_owned())).collect();
        let flipped: Vec<(String, String)> = sent.iter().map(|(n, v)| (flip_case(n, mask), v.clone())).collect();
        let expected = wanted.iter().all(|(name, value)| {
            sent.iter().any(|(n, v)| n.eq_ignore_ascii_case(name) && v == value)
        });
        prop_assert_eq!(filter.matches_headers(&sent), expected);
        prop_assert_eq!(filter.matches_headers(&flipped), expected);
    }
}
