//! Arbitrary JSON pointers (with `*` segments) and bodies → the two readers of `*` pointers:
//! a digest id (`sha256:json:/items/*/id`, HubSpot's kind) and a token in the body (Microsoft
//! Graph's `/value/*/clientState`), each checked against an independent expansion.
//!
//! Input layout: `[mode, pointer 0x00 body...]`; mode bit 0 picks the token definition.
//!
//! Checked: nothing panics; a digest id is exactly SHA-256 over each expanded value's length
//! (8 bytes, big-endian) and bytes, and is refused when any element lacks the value, when the
//! expansion passes 1,000 values at any step, or when the body is not JSON; a token batch is
//! accepted only when every expanded value is the token and there are at most 32 of them.

#![no_main]

use bytes::Bytes;
use hmac::{Hmac, Mac};
use hookgate::verify::{
    parse_definition, RequestHeaders, SourceVerifier, Unverified, Verified, VerifyError,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

const NOW: i64 = 1_700_000_000;
const MAX_EXPANDED: usize = 1000;
const TOKEN: &str = "fuzz-token";

/// RFC 6901 array indexes: "0", or digits without a leading zero.
fn index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

/// Each value a `*` pointer reaches (`None` where it has no text), or `Err` past the limit.
fn expand(doc: &Value, pointer: &str) -> Result<Vec<Option<String>>, ()> {
    let mut at: Vec<Option<&Value>> = vec![Some(doc)];
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        let mut next = Vec::new();
        for v in at {
            match (token.as_str(), v) {
                ("*", Some(Value::Array(items))) => next.extend(items.iter().map(Some)),
                (_, Some(Value::Object(map))) => next.push(map.get(&token)),
                (_, Some(Value::Array(items))) => {
                    next.push(index(&token).and_then(|i| items.get(i)))
                }
                _ => next.push(None),
            }
        }
        if next.len() > MAX_EXPANDED {
            return Err(());
        }
        at = next;
    }
    Ok(at
        .into_iter()
        .map(|v| match v {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(n.to_string()),
            _ => None,
        })
        .collect())
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn digest_id(pointer: &str, body: &[u8]) {
    let location = toml_string(&format!("sha256:json:{pointer}"));
    let text = format!(
        "name = \"batch\"\n[signature]\nheaders = [\"X-Sig\"]\nalgorithm = \"hmac-sha256\"\nencoding = \"hex\"\n[event]\nid = [{location}]\n"
    );
    let Ok(def) = parse_definition("batch.toml", &text) else {
        return;
    };
    let verifier = SourceVerifier::new(def, &["k"]).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(b"k").unwrap();
    mac.update(body);
    let headers: RequestHeaders = [("x-sig", hex::encode(mac.finalize().into_bytes()))]
        .into_iter()
        .collect();
    let result = Unverified::new(headers, Bytes::copy_from_slice(body)).verify(&verifier, NOW);
    let expected = match serde_json::from_slice::<Value>(body) {
        Err(_) => Err(VerifyError::MalformedBody),
        Ok(doc) => match expand(&doc, pointer) {
            Err(()) => Err(VerifyError::MalformedBody),
            Ok(values) => match values.into_iter().collect::<Option<Vec<_>>>() {
                Some(values) if !values.is_empty() => {
                    let mut hash = Sha256::new();
                    for v in values {
                        hash.update((v.len() as u64).to_be_bytes());
                        hash.update(v.as_bytes());
                    }
                    Ok(format!("sha256:{}", hex::encode(hash.finalize())))
                }
                _ => Err(VerifyError::MissingEventId(String::new())),
            },
        },
    };
    match (result, expected) {
        (Ok(Verified::Event(e)), Ok(id)) => assert_eq!(e.provider_event_id().as_str(), id),
        (Err(VerifyError::MissingEventId(_)), Err(VerifyError::MissingEventId(_))) => {}
        (Err(a), Err(b)) => assert_eq!(a, b),
        (got, want) => panic!("{pointer:?}: got {got:?}, expected {want:?}"),
    }
}

fn token_batch(pointer: &str, body: &[u8]) {
    let text = format!(
        "name = \"tokens\"\n[signature]\nbody_pointer = {}\nalgorithm = \"token\"\nencoding = \"text\"\n[event]\nid = [\"sha256:body\"]\n",
        toml_string(pointer)
    );
    let Ok(def) = parse_definition("tokens.toml", &text) else {
        return;
    };
    let verifier = SourceVerifier::new(def, &[TOKEN]).unwrap();
    let result =
        Unverified::new(RequestHeaders::new(), Bytes::copy_from_slice(body)).verify(&verifier, NOW);
    if let Ok(verified) = result {
        assert!(matches!(verified, Verified::Event(_)));
        let doc: Value = serde_json::from_slice(body).expect("an accepted body is JSON");
        if pointer.split('/').any(|t| t == "*") {
            let values = expand(&doc, pointer).expect("within the limit");
            assert!(
                !values.is_empty() && values.len() <= 32,
                "{} values",
                values.len()
            );
            assert!(
                values.iter().all(|v| v.as_deref() == Some(TOKEN)),
                "{values:?}"
            );
        } else {
            assert_eq!(doc.pointer(pointer).and_then(Value::as_str), Some(TOKEN));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut parts = rest.splitn(2, |b| *b == 0);
    let Ok(pointer) = std::str::from_utf8(parts.next().unwrap_or_default()) else {
        return;
    };
    let body = parts.next().unwrap_or_default();
    // A digest lists its fields with commas: a pointer with one is two fields.
    if !pointer.starts_with('/') || pointer.contains(',') {
        return;
    }
    if mode & 1 == 0 {
        digest_id(pointer, body);
    } else {
        token_batch(pointer, body);
    }
});
