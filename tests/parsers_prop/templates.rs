//! The signed-payload template parser.

use crate::common::*;

/// An independent reading of the template rules: `{name}` placeholders must be closed and
/// be body, timestamp, id, url, method, form_params, header:<Name>, query:<name> or
/// json:/pointer; text outside them (a lone `}` included) is literal. (Whether the body is
/// covered is a rule of the definition, not of the template.)
fn template_is_valid(s: &str) -> bool {
    let mut rest = s;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return false;
        };
        match &after[..close] {
            "body" | "timestamp" | "id" | "url" | "method" | "form_params" => {}
            name => {
                let ok = match (
                    name.strip_prefix("header:"),
                    name.strip_prefix("query:"),
                    name.strip_prefix("json:"),
                ) {
                    (Some(h), _, _) | (_, Some(h), _) => !h.is_empty(),
                    (_, _, Some(p)) => p.starts_with('/'),
                    _ => false,
                };
                if !ok {
                    return false;
                }
            }
        }
        rest = &after[close + 1..];
    }
    true
}

fn template_like() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        4 => select(vec!["{body}", "{timestamp}", "{id}", "{header:X-A}", "{url}", "{json:/a/0}", "{query:q}", ".", ":", "v0", "}", "é"])
            .prop_map(str::to_owned),
        1 => select(vec!["{", "{}", "{header:}", "{bod}", "{BODY}", "{ body}", "{header}", "{{body}}", "{json:a}", "{query:}", "{hmac-sha256-hex:json:/a}"])
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
        let parsed = Template::parse(&s, TemplateKind::SignedPayload);
        prop_assert_eq!(parsed.is_ok(), template_is_valid(&s), "{:?}: {:?}", s, parsed);
        match &parsed {
            Err(message) => prop_assert!(!message.is_empty()),
            // Parsing is deterministic.
            Ok(_) => prop_assert_eq!(Template::parse(&s, TemplateKind::SignedPayload), parsed),
        }
    }
}
