//! Arbitrary bytes → `Template::parse` for signed payloads, compared with an independent
//! reading of the rules: placeholders `{body}`, `{timestamp}`, `{id}`, `{url}`, `{method}`,
//! `{form_params}`, `{header:<Name>}`, `{query:<name>}` and `{json:/pointer}` must be closed
//! and known; text outside them (a lone `}` included) is literal. Whether the body is covered
//! is a rule of the definition, not of the template.

#![no_main]

use hookgate::verify::{Template, TemplateKind};
use libfuzzer_sys::fuzz_target;

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

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = Template::parse(s, TemplateKind::SignedPayload);
    assert_eq!(parsed.is_ok(), template_is_valid(s), "{s:?}: {parsed:?}");
    match &parsed {
        Err(message) => assert!(!message.is_empty()),
        Ok(_) => assert_eq!(&Template::parse(s, TemplateKind::SignedPayload), &parsed),
    }
});
