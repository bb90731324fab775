//! Hostile sizes for every built-in provider: a signature value of 1,000 entries, a 100 KB
//! signature or timestamp, `*` pointers over 100,000 array elements. Each is refused with the
//! error it must get, and where the limit is what refuses it, the error says so: "too many
//! signatures" is returned while the value is parsed, before any key is tried, so a request
//! costs at most `MAX_CANDIDATES` checks per key whatever it carries.

use crate::common::*;
use crate::sources::*;

use hookgate::verify::{SignatureSource, MAX_CANDIDATES};

const TOO_MANY: VerifyError = VerifyError::MalformedSignature("too many signatures");
const HUGE: usize = 100_000;

/// Each provider's source, with a public key too where it takes one.
fn every_source() -> Vec<SourceVerifier> {
    let mut all = Vec::new();
    for name in providers() {
        all.push(source(name, false));
        let def = definition(name);
        if def.asymmetric_algorithm().is_some() && def.takes_secrets() {
            all.push(source(name, true));
        }
    }
    all
}

/// The signature value of a signed request, where the definition reads it.
fn signature_value(verifier: &SourceVerifier, signed: &SignedRequest) -> String {
    match &verifier.definition().signature.source {
        SignatureSource::Headers { names, .. } => signed
            .headers
            .get_all(&names[0])
            .next()
            .expect("signed")
            .to_owned(),
        SignatureSource::Body(pointer) => {
            let doc: serde_json::Value = serde_json::from_slice(&signed.body).unwrap();
            doc.pointer(&first_element(pointer))
                .and_then(|v| v.as_str())
                .unwrap()
                .to_owned()
        }
    }
}

/// A `*` pointer's first element (`hookgate send` signs a batch of one).
fn first_element(pointer: &str) -> String {
    pointer.replace("/*/", "/0/")
}

/// The signed request with its signature value (in every signature header, or the body
/// field) replaced by `value`.
fn with_signature(
    verifier: &SourceVerifier,
    signed: &SignedRequest,
    value: &str,
) -> (RequestHeaders, Vec<u8>) {
    match &verifier.definition().signature.source {
        SignatureSource::Headers { names, .. } => {
            let mut headers = signed.headers.clone();
            for name in names {
                headers = with_header(&headers, name, value);
            }
            (headers, signed.body.clone())
        }
        SignatureSource::Body(pointer) => (
            signed.headers.clone(),
            with_body_field(&signed.body, &first_element(pointer), value.into()),
        ),
    }
}

/// `count` signature entries in the provider's own layout, the true signature among them:
/// the timestamp field once, then the signature entry repeated.
fn entries(verifier: &SourceVerifier, value: &str, count: usize) -> String {
    match &verifier.definition().signature.format {
        SignatureFormat::KeyValue {
            pair_separator,
            signature_keys,
            kv_separator,
            ..
        } => {
            let sig_key = format!("{}{kv_separator}", signature_keys[0]);
            let parts: Vec<&str> = value.split(pair_separator.as_str()).collect();
            let sig = parts.iter().find(|p| p.starts_with(&sig_key)).unwrap();
            let mut out: Vec<&str> = parts.iter().filter(|p| *p != sig).copied().collect();
            out.extend(std::iter::repeat_n(*sig, count));
            out.join(pair_separator)
        }
        SignatureFormat::List { list_separator, .. } => vec![value; count].join(list_separator),
        SignatureFormat::Raw => vec![value; count].join(","),
    }
}

fn lists(verifier: &SourceVerifier) -> bool {
    !matches!(verifier.definition().signature.format, SignatureFormat::Raw)
}

/// A thousand entries are refused for every provider: where the format is a list (kv or
/// list), as too many before any key is tried, the true signature among them notwithstanding;
/// where it is one value (Box's two headers included), as a value that does not decode or
/// match. The limit is exact: `MAX_CANDIDATES` entries still verify.
#[test]
fn a_thousand_entries_are_refused_for_every_provider() {
    for verifier in every_source() {
        let name = verifier.provider_name().to_owned();
        let signed = signed_request(&verifier, "bound-1", "");
        let value = signature_value(&verifier, &signed);
        let (headers, body) = with_signature(&verifier, &signed, &entries(&verifier, &value, 1000));
        let result = verify_signed(&verifier, &headers, &body, &signed.query);
        if lists(&verifier) {
            assert_eq!(result.err(), Some(TOO_MANY), "{name}");
            let at_limit = entries(&verifier, &value, MAX_CANDIDATES);
            let (headers, body) = with_signature(&verifier, &signed, &at_limit);
            let result = verify_signed(&verifier, &headers, &body, &signed.query);
            assert!(
                matches!(result, Ok(Verified::Event(_))),
                "{name}: {result:?}"
            );
        } else {
            let code = result.as_ref().err().map(VerifyError::code);
            assert_eq!(code, Some("invalid_signature"), "{name}: {result:?}");
        }
    }
}

/// Graph's `*` pointer: each notification's clientState is a candidate, so a batch of 1,000
/// is too many; past `MAX_EXPANDED` (1,000) elements the body itself is refused.
#[test]
fn graph_batches_past_the_limits_are_refused() {
    let verifier = SourceVerifier::new(definition("microsoft-graph"), &["state"]).unwrap();
    let body = |n: usize, state: &str| {
        let items = vec![format!(r#"{{"clientState":"{state}","changeType":"created"}}"#); n];
        format!(r#"{{"value":[{}]}}"#, items.join(",")).into_bytes()
    };
    let verify = |b: Vec<u8>| verify_signed(&verifier, &RequestHeaders::new(), &b, "");
    assert!(matches!(
        verify(body(MAX_CANDIDATES, "state")),
        Ok(Verified::Event(_))
    ));
    assert_eq!(
        verify(body(MAX_CANDIDATES + 1, "state")).err(),
        Some(TOO_MANY)
    );
    assert_eq!(verify(body(1000, "state")).err(), Some(TOO_MANY));
    for n in [1001, HUGE] {
        assert_eq!(
            verify(body(n, "state")).err(),
            Some(VerifyError::MalformedBody),
            "{n}"
        );
    }
    // Elements that are not objects count as elements, too.
    let numbers = format!(r#"{{"value":[{}]}}"#, vec!["1"; HUGE].join(","));
    assert_eq!(
        verify(numbers.into_bytes()).err(),
        Some(VerifyError::MalformedBody)
    );
}

/// A digest over a `*` pointer (an id made of every element's field) refuses a body that
/// expands past the limit; HubSpot, which lists `sha256:body` after it, falls back to that.
#[test]
fn digests_over_huge_arrays_are_refused_or_fall_back() {
    let def = parse_definition(
        "batch.toml",
        r#"
name = "batch"
[signature]
headers = ["X-Sig"]
algorithm = "hmac-sha256"
encoding = "hex"
[event]
id = ["sha256:json:/items/*/id"]
"#,
    )
    .unwrap();
    let verifier = SourceVerifier::new(def, &["k"]).unwrap();
    let request = |n: usize| {
        let items = vec![r#"{"id":"e"}"#; n].join(",");
        let body = format!(r#"{{"items":[{items}]}}"#).into_bytes();
        let sig = hex::encode(hmac_sha256(b"k", &body));
        let headers: RequestHeaders = [("x-sig", sig)].into_iter().collect();
        verify_signed(&verifier, &headers, &body, "")
    };
    match request(1000) {
        Ok(Verified::Event(e)) => assert!(e.provider_event_id().as_str().starts_with("sha256:")),
        other => panic!("{other:?}"),
    }
    assert_eq!(request(HUGE).err(), Some(VerifyError::MalformedBody));

    let hubspot = source("hubspot", false);
    let events = vec![r#"{"eventId":1,"subscriptionType":"contact.creation"}"#; HUGE].join(",");
    let signed = sign_request(&hubspot, format!("[{events}]").into_bytes(), "h", "t", NOW).unwrap();
    let digest = {
        use sha2::Digest as _;
        format!("sha256:{}", hex::encode(sha2::Sha256::digest(&signed.body)))
    };
    match verify_signed(&hubspot, &signed.headers, &signed.body, &signed.query) {
        Ok(Verified::Event(e)) => assert_eq!(e.provider_event_id().as_str(), digest),
        other => panic!("{other:?}"),
    }
}

/// 100 KB signature values (decodable hex and base64, after the prefix, after a `t=`):
/// refused as invalid for every provider, without a panic.
#[test]
fn hundred_kb_signature_values_are_refused() {
    for verifier in every_source() {
        let name = verifier.provider_name().to_owned();
        let signed = signed_request(&verifier, "bound-2", "");
        let value = signature_value(&verifier, &signed);
        let prefix = &verifier.definition().signature.prefix;
        let ts = value
            .split(',')
            .find(|p| p.starts_with("t="))
            .unwrap_or("t=1");
        for huge in [
            "a".repeat(HUGE),
            "A".repeat(HUGE),
            format!("{prefix}{}", "0".repeat(HUGE)),
            format!("{ts},v1={}", "f".repeat(HUGE)),
            format!("v1,{} v1a,{}", "A".repeat(HUGE / 2), "B".repeat(HUGE / 2)),
            format!("Basic {}", "QUJD".repeat(HUGE / 4)),
        ] {
            let (headers, body) = with_signature(&verifier, &signed, &huge);
            let result = verify_signed(&verifier, &headers, &body, &signed.query);
            let code = result.as_ref().err().map(VerifyError::code);
            assert_eq!(code, Some("invalid_signature"), "{name}: {result:?}");
        }
    }
}

/// Where each definition reads its timestamp, from its file (`TimestampSource` is not
/// exported): "signature", "header:Name" or "json:/pointer".
fn timestamp_locations(name: &str) -> Vec<String> {
    definition_texts()
        .iter()
        .filter_map(|(_, text)| toml::from_str::<toml::Table>(text).ok())
        .find(|t| t["name"].as_str() == Some(name))
        .and_then(|t| t.get("timestamp")?.get("from")?.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// A 100 KB timestamp put in place of a signed one: refused as invalid, for every provider
/// with a timestamp.
#[test]
fn hundred_kb_timestamps_in_signed_requests_are_refused() {
    let mut checked = 0;
    for verifier in every_source() {
        let name = verifier.provider_name().to_owned();
        let Some(location) = timestamp_locations(&name).into_iter().next() else {
            continue;
        };
        let signed = signed_request(&verifier, "bound-3", "");
        let huge = "1".repeat(HUGE);
        let (headers, body) = if location == "signature" {
            let value = signature_value(&verifier, &signed);
            let sep = match &verifier.definition().signature.format {
                SignatureFormat::KeyValue { pair_separator, .. } => pair_separator.clone(),
                other => panic!("{name}: {other:?}"),
            };
            let rest: Vec<&str> = value.split(sep.as_str()).skip(1).collect();
            let key = value.split('=').next().unwrap();
            let value = format!("{key}={huge}{sep}{}", rest.join(&sep));
            with_signature(&verifier, &signed, &value)
        } else if let Some(header) = location.strip_prefix("header:") {
            (
                with_header(&signed.headers, header, &huge),
                signed.body.clone(),
            )
        } else {
            let pointer = location.strip_prefix("json:").unwrap();
            (
                signed.headers.clone(),
                with_body_field(&signed.body, pointer, huge.into()),
            )
        };
        let result = verify_signed(&verifier, &headers, &body, &signed.query);
        let code = result.as_ref().err().map(VerifyError::code);
        assert_eq!(code, Some("invalid_signature"), "{name}: {result:?}");
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} providers with a timestamp");
}

/// Correctly signed over a 100 KB timestamp (seconds, a `t=` field, RFC 3339): the signature
/// matches, and the timestamp is refused unread.
#[test]
fn correctly_signed_hundred_kb_timestamps_are_refused() {
    let digits = "1".repeat(HUGE);
    let rfc = format!("2023-11-14T22:13:20.{digits}Z");
    let body = br#"{"id":"evt_1","event_id":"Ev1"}"#;
    let hex_mac = |key: &str, m: Vec<u8>| hex::encode(hmac_sha256(key.as_bytes(), &m));
    let cat = |a: &str, b: &[u8]| [a.as_bytes(), b].concat();
    let cases: Vec<(&str, Vec<(&str, String)>)> = vec![
        (
            "stripe",
            vec![(
                "stripe-signature",
                format!(
                    "t={digits},v1={}",
                    hex_mac(SECRET, cat(&format!("{digits}."), body))
                ),
            )],
        ),
        (
            "slack",
            vec![
                (
                    "x-slack-signature",
                    format!(
                        "v0={}",
                        hex_mac(SECRET, cat(&format!("v0:{digits}:"), body))
                    ),
                ),
                ("x-slack-request-timestamp", digits.clone()),
            ],
        ),
        (
            "twitch",
            vec![
                (
                    "twitch-eventsub-message-signature",
                    format!(
                        "sha256={}",
                        hex_mac(SECRET, cat(&format!("m-1{rfc}"), body))
                    ),
                ),
                ("twitch-eventsub-message-id", "m-1".into()),
                ("twitch-eventsub-message-timestamp", rfc.clone()),
            ],
        ),
    ];
    for (name, headers) in cases {
        let verifier = source(name, false);
        let headers: RequestHeaders = headers.into_iter().collect();
        assert_eq!(
            verify_signed(&verifier, &headers, body, "").err(),
            Some(VerifyError::MalformedSignature(
                "the timestamp cannot be read"
            )),
            "{name}"
        );
    }
}
