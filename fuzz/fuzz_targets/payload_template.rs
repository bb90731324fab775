//! Arbitrary bytes → `PayloadTemplate::parse`, compared with an independent reading of the
//! rules: placeholders `{body}`, `{timestamp}`, `{id}`, `{header:<Name>}` must be closed and
//! known, text outside them (a lone `}` included) is literal, and `{body}` must appear.

#![no_main]

use hookgate::verify::PayloadTemplate;
use libfuzzer_sys::fuzz_target;

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

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = PayloadTemplate::parse(s);
    assert_eq!(parsed.is_ok(), template_is_valid(s), "{s:?}: {parsed:?}");
    match &parsed {
        Err(message) => assert!(!message.is_empty()),
        Ok(_) => assert_eq!(&PayloadTemplate::parse(s), &parsed),
    }
});
