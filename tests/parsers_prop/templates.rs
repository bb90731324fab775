//! The signed-payload template parser.

use crate::common::*;

/// An independent reading of the template rules: `{name}` placeholders must be closed and
/// be body, timestamp, id or header:<Name>; text outside them (a lone `}` included) is
/// literal; `{body}` must appear.
fn template_is_valid(s: &str) -> bool {
    let mut rest = s;
    let mut has_body = false;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return false;
        };
        match &after[..close] {
            "body" => has_body = true,
            "timestamp" | "id" => {}
            name => match name.strip_prefix("header:") {
                Some(h) if !h.is_empty() => {}
                _ => return false,
            },
        }
        rest = &after[close + 1..];
    }
    has_body
}

fn template_like() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        4 => select(vec!["{body}", "{timestamp}", "{id}", "{header:X-A}", ".", ":", "v0", "}", "é"])
            .prop_map(str::to_owned),
        1 => select(vec!["{", "{}", "{header:}", "{bod}", "{BODY}", "{ body}", "{header}", "{{body}}"])
            .prop_map(str::to_owned),
        1 => "[a-z.:{}]{0,3}",
    ];
    let parts = proptest::collection::vec(part, 0..6);
    prop_oneof![
        3 => (parts.clone(), any::<prop::sample::Index>()).prop_map(|(mut v, at)| {
            v.insert(at.index(v.len() + 1), "{body}".to_owned());
            v.concat()
        }),
        2 => parts.prop_map(|v| v.concat()),
        1 => any::<String>(),
        1 => "[{}a-z:]{0,16}",
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn template_parser_never_panics_and_follows_the_rules(s in template_like()) {
        let parsed = PayloadTemplate::parse(&s);
        prop_assert_eq!(parsed.is_ok(), template_is_valid(&s), "{:?}: {:?}", s, parsed);
        match &parsed {
            Err(message) => prop_assert!(!message.is_empty()),
            // Parsing is deterministic.
            Ok(_) => prop_assert_eq!(PayloadTemplate::parse(&s), parsed),
        }
    }
}
