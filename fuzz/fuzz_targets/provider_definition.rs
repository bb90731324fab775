//! Arbitrary bytes → `parse_definition`. A definition that parses must be consistent, build a
//! verifier, and verify a request made of its own header names without panicking.

#![no_main]

use bytes::Bytes;
use hookgate::verify::{
    parse_definition, Location, RequestHeaders, SignatureFormat, SourceVerifier, Unverified,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let def = match parse_definition("fuzz.toml", &text) {
        Ok(def) => def,
        Err(e) => {
            assert!(e.to_string().contains("fuzz.toml"));
            return;
        }
    };
    assert!(!def.name.is_empty());
    assert!(!def.signature.headers.is_empty());
    assert!(!def.event_id.is_empty());
    if let Some(ts) = &def.timestamp {
        assert!(ts.tolerance_seconds > 0);
    }
    match &def.signature.format {
        SignatureFormat::Raw { .. } => {}
        SignatureFormat::KeyValue {
            pair_separator,
            kv_separator,
            signature_keys,
            ..
        } => assert!(
            !pair_separator.is_empty() && !kv_separator.is_empty() && !signature_keys.is_empty()
        ),
        SignatureFormat::List {
            list_separator,
            item_separator,
            versions,
        } => assert!(
            !list_separator.is_empty() && !item_separator.is_empty() && !versions.is_empty()
        ),
    }

    // "c2VjcmV0" is valid both as UTF-8 and as base64, after the definition's prefix.
    let secret = format!("{}c2VjcmV0", def.secret.strip_prefix);
    let mut names: Vec<String> = def.signature.headers.clone();
    for loc in def.event_id.iter().chain(&def.event_type) {
        if let Location::Header(h) = loc {
            names.push(h.clone());
        }
    }
    let verifier = SourceVerifier::new(def, &[&secret]).expect("a usable secret");
    // The same input, reused as every header value and as the body.
    let mut headers = RequestHeaders::new();
    for name in names
        .iter()
        .map(String::as_str)
        .chain(["x-ts", "webhook-timestamp"])
    {
        headers.push(name, text.to_string());
    }
    let _ = Unverified::new(headers, Bytes::copy_from_slice(data)).verify(&verifier, 1_700_000_000);
});
