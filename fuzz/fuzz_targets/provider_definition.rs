//! Arbitrary bytes → `parse_definition`. A definition that parses must be consistent, build a
//! verifier, and verify a request made of its own header names without panicking.

#![no_main]

use bytes::Bytes;
use hookgate::verify::{
    parse_definition, Location, RequestHeaders, SignatureFormat, SignatureSource, SourceVerifier,
    Unverified,
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
    let body_signed = matches!(def.signature.source, SignatureSource::Body(_));
    assert_eq!(def.signature.headers().is_empty(), body_signed);
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

    // A secret written as the definition says ("secret" as UTF-8, base64 or hex after its
    // prefix). A definition taking only public keys gets the same text, which is no key:
    // loading it must fail cleanly.
    let encoding = format!("{:?}", def.secret.encoding);
    let secret = format!(
        "{}{}",
        def.secret.strip_prefix,
        match encoding.as_str() {
            "Hex" => "736563726574",
            "Base64" => "c2VjcmV0",
            _ => "secret",
        }
    );
    let mut names: Vec<String> = def.signature.headers().to_vec();
    for loc in def.event_id.iter().chain(&def.event_type) {
        if let Location::Header(h) = loc {
            names.push(h.clone());
        }
    }
    let public_only = def.asymmetric_algorithm().is_some() && !def.takes_secrets();
    let verifier = match SourceVerifier::new(def, &[&secret]) {
        Ok(v) => v,
        Err(_) if public_only => return,
        Err(e) => panic!("a usable secret refused: {e:?}"),
    };
    // The same input, reused as every header value and as the body.
    let mut headers = RequestHeaders::new();
    for name in names
        .iter()
        .map(String::as_str)
        .chain(["x-ts", "webhook-timestamp"])
    {
        headers.push(name, text.to_string());
    }
    let result = Unverified::new(headers, Bytes::copy_from_slice(data))
        .with_target("POST", "challenge=x&validationToken=y")
        .verify(&verifier, 1_700_000_000);
    if let Ok(hookgate::verify::Verified::Challenge(answer)) = result {
        assert!(answer.body.len() <= 4096);
    }
});
