//! Arbitrary requests → every built-in provider, configured as a user would (a secret, or a
//! public key with its private half for `hookgate send`, a public URL, a verify token):
//! HMAC, Ed25519, ECDSA P-256, tokens, signatures in the body, signed URLs and handshakes.
//!
//! Input layout: `[provider, flags, method, query 0x00 sig 0x00 ts 0x00 id 0x00 body...]`.
//! - `provider` picks the built-in definition (by sorted name); flags bit 0: for a provider
//!   taking both, configure a public key rather than a secret.
//! - flags bit 1 (signed): the request `hookgate send` signs, its body carrying the input's
//!   body as a string; bit 2 then replaces the header the flags' high bits pick with `sig`.
//! - otherwise: every signature header holds `sig`, every other header the definition reads
//!   holds `ts` (names with "timestamp") or `id`, and the body is the input's.
//!
//! Checked: nothing panics; an unsigned request is never an event; a handshake answer fits
//! in 4 KiB; a signed request left alone is never refused for its signature or timestamp.

#![no_main]

use std::sync::OnceLock;

use base64::Engine as _;
use bytes::Bytes;
use hookgate::verify::{
    sample_body, sign_request, Algorithm, ProviderRegistry, RequestHeaders, SourceVerifier,
    Unverified, Verified, VerifyError,
};
use libfuzzer_sys::fuzz_target;

const NOW: i64 = 1_700_000_000;
const SEED: [u8; 32] = [7; 32];

struct Provider {
    verifier: SourceVerifier,
    /// Every header the definition reads, the signature's first.
    headers: Vec<String>,
    signature_headers: usize,
}

fn encode(encoding: &impl std::fmt::Debug, prefix: &str, bytes: &[u8]) -> String {
    let text = match format!("{encoding:?}").as_str() {
        "Hex" => hex::encode(bytes),
        _ => base64::engine::general_purpose::STANDARD.encode(bytes),
    };
    format!("{prefix}{text}")
}

fn public_key(algorithm: Algorithm) -> Vec<u8> {
    match algorithm {
        Algorithm::Ed25519 => ed25519_dalek::SigningKey::from_bytes(&SEED)
            .verifying_key()
            .to_bytes()
            .to_vec(),
        _ => {
            let key = p256::ecdsa::SigningKey::from_bytes(&SEED.into()).unwrap();
            let mut der =
                hex::decode("3059301306072a8648ce3d020106082a8648ce3d030107034200").unwrap();
            der.extend_from_slice(key.verifying_key().to_encoded_point(false).as_bytes());
            der
        }
    }
}

fn source(name: &str, public: bool) -> SourceVerifier {
    let registry = ProviderRegistry::builtin().expect("built-in definitions parse");
    let def = registry.get(name).unwrap().as_ref().clone();
    let verifier = match (def.asymmetric_algorithm(), def.public_key.clone()) {
        (Some(alg), Some(pk)) if public || !def.takes_secrets() => {
            let key = encode(&pk.encoding, &pk.strip_prefix, &public_key(alg));
            let private = encode(&pk.encoding, &pk.strip_prefix, &SEED);
            SourceVerifier::new(def, &[&key])
                .unwrap()
                .with_signing_key(&private)
                .unwrap()
        }
        _ if def.secret.strip_prefix == "whsec_" => {
            SourceVerifier::new(def, &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap()
        }
        _ => SourceVerifier::new(def, &["fuzz-secret"]).unwrap(),
    };
    let verifier = if verifier.definition().needs_public_url() {
        verifier
            .with_public_url("https://hooks.example.com/webhooks/fuzz")
            .unwrap()
    } else {
        verifier
    };
    if verifier.definition().needs_verify_token() {
        verifier.with_verify_token("fuzz-verify-token")
    } else {
        verifier
    }
}

/// Header names a definition's file mentions (`header:Name`), besides its signature headers.
fn mentioned_headers(name: &str) -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../providers");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(path).expect("providers/").flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if !text.contains(&format!("name = \"{name}\"")) {
            continue;
        }
        for (at, _) in text.match_indices("header:") {
            let rest = &text[at + 7..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                .unwrap_or(rest.len());
            if end > 0 {
                out.push(rest[..end].to_ascii_lowercase());
            }
        }
    }
    out
}

fn providers() -> &'static [[Provider; 2]] {
    static ALL: OnceLock<Vec<[Provider; 2]>> = OnceLock::new();
    ALL.get_or_init(|| {
        let registry = ProviderRegistry::builtin().unwrap();
        let names: Vec<String> = registry
            .names()
            .filter(|n| registry.get(n).unwrap().name == *n)
            .map(str::to_owned)
            .collect();
        names
            .iter()
            .map(|name| {
                [false, true].map(|public| {
                    let verifier = source(name, public);
                    let mut headers = verifier.definition().signature.headers().to_vec();
                    let signature_headers = headers.len();
                    for h in mentioned_headers(name) {
                        if !headers.contains(&h) {
                            headers.push(h);
                        }
                    }
                    headers.push("content-type".into());
                    Provider {
                        verifier,
                        headers,
                        signature_headers,
                    }
                })
            })
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let (selector, flags, method) = (data[0], data[1], data[2]);
    let all = providers();
    let p = &all[usize::from(selector) % all.len()][usize::from(flags & 1)];
    let mut parts = data[3..].splitn(5, |b| *b == 0);
    let mut text = || String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let (query, sig, ts, id) = (text(), text(), text(), text());
    let body = parts.next().unwrap_or_default().to_vec();
    let method = ["POST", "GET", "PUT"][usize::from(method % 3)];

    let signed = flags & 2 != 0;
    let (headers, body, query, mutated) = if signed {
        let mut doc: serde_json::Value =
            serde_json::from_slice(&sample_body(&p.verifier, "fuzz-id", "fuzz.event")).unwrap();
        let pad = serde_json::Value::String(String::from_utf8_lossy(&body).into_owned());
        match &mut doc {
            serde_json::Value::Array(items) => items[0]["pad"] = pad,
            other => other["pad"] = pad,
        }
        let Ok(request) = sign_request(
            &p.verifier,
            serde_json::to_vec(&doc).unwrap(),
            "fuzz-id",
            "fuzz.event",
            NOW,
        ) else {
            return;
        };
        let mut headers = request.headers;
        let mutated = flags & 4 != 0;
        if mutated {
            let name = &p.headers[usize::from(flags >> 3) % p.headers.len()];
            let mut out = RequestHeaders::new();
            for (n, v) in headers.iter().filter(|(n, _)| n != name) {
                out.push(n, v.to_owned());
            }
            out.push(name, sig.clone());
            headers = out;
        }
        (headers, request.body, request.query, mutated)
    } else {
        let mut headers = RequestHeaders::new();
        for (i, name) in p.headers.iter().enumerate() {
            let value = if i < p.signature_headers {
                &sig
            } else if name.contains("timestamp") {
                &ts
            } else {
                &id
            };
            headers.push(name, value.clone());
        }
        (headers, body, query, false)
    };
    let method = if signed && !mutated { "POST" } else { method };
    let result = Unverified::new(headers, Bytes::from(body))
        .with_target(method, &query)
        .verify(&p.verifier, NOW);
    match result {
        Ok(Verified::Event(_)) => assert!(signed, "an unsigned request was accepted"),
        Ok(Verified::Challenge(answer)) => assert!(answer.body.len() <= 4096),
        Err(
            VerifyError::InvalidSignature
            | VerifyError::MalformedSignature(_)
            | VerifyError::MissingSignature(_)
            | VerifyError::TimestampOutOfTolerance(_),
        ) if signed && !mutated => panic!("a signed request was refused: {result:?}"),
        Err(_) => {}
    }
});
