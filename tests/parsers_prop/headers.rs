//! Header parsers: no panics, and only what the header holds comes out.

use crate::common::*;
use crate::sources::provider;

fn b64_unpadded(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes)
}

/// Whatever the parser returns must be written in the header: each candidate's canonical
/// encoding appears in the value, and a timestamp appears after its key.
fn check_parsed_against_value(
    (format, prefix): &(SignatureFormat, String),
    encoding: Encoding,
    value: &str,
) {
    let Some(parsed) =
        parse_signature_header(format, prefix, Algorithm::HmacSha256, encoding, value)
    else {
        return;
    };
    assert!(
        !parsed.candidates.is_empty(),
        "Some(..) with no candidates for {value:?}"
    );
    assert!(parsed.candidates.len() <= hookgate::verify::MAX_CANDIDATES);
    for c in parsed.candidates.iter().map(|c| &c.bytes) {
        let found = match encoding {
            Encoding::Hex => value.to_ascii_lowercase().contains(&hex::encode(c)),
            Encoding::Base64 => value.contains(&b64_unpadded(c)),
            Encoding::Text => value.contains(&*String::from_utf8_lossy(c)),
        };
        assert!(
            found,
            "candidate {c:?} is not in {value:?} ({format:?}, {encoding:?})"
        );
    }
    if let (Some(ts), SignatureFormat::KeyValue { kv_separator, .. }) = (&parsed.timestamp, format)
    {
        assert!(
            value.contains(&format!("{kv_separator}{ts}")),
            "timestamp {ts:?} is not in {value:?}"
        );
    }
}

proptest! {
    #![proptest_config(config())]

    /// Every built-in provider's header format, on arbitrary and on header-like values.
    #[test]
    fn builtin_header_parsers_never_panic(provider in provider(), value in header_like()) {
        let def = definition(&provider);
        let format = (def.signature.format.clone(), def.signature.prefix.clone());
        check_parsed_against_value(&format, def.signature.encoding, &value);
    }

    /// Any format (even with empty separators, which a definition file cannot have), either
    /// encoding, any value.
    #[test]
    fn any_header_format_never_panics(format in any_format(), encoding in encoding(), value in header_like()) {
        check_parsed_against_value(&format, encoding, &value);
    }

    /// A full verification with arbitrary header values against every built-in provider:
    /// no panic, and (with overwhelming probability) no acceptance.
    #[test]
    fn verify_with_arbitrary_headers_never_panics_nor_accepts(
        kind in kind(),
        value in header_like(),
        other in header_like(),
        body in filler(),
    ) {
        let secret = secret_for(kind, b"property-test-secret");
        let v = verifier(kind, std::slice::from_ref(&secret));
        let mut headers = RequestHeaders::new();
        headers.push(kind.signature_header(), value);
        for name in ["x-slack-request-timestamp", "webhook-timestamp", "webhook-id", "x-github-delivery", "x-shopify-webhook-id", "x-webhook-id"] {
            headers.push(name, other.clone());
        }
        let result = Unverified::new(headers, Bytes::from(body)).verify(&v, NOW);
        prop_assert!(result.is_err(), "accepted an arbitrary header: {result:?}");
    }
}
