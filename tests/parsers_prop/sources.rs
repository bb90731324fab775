//! Sources for every built-in provider, configured as a user would (a secret, or a public key
//! with its private half as the test signing key, a public URL, a verify token), and the
//! requests `sign_request` makes for them. Shared by the groups that cover all providers.

use crate::common::*;

pub(crate) use hookgate::verify::{sample_body, sign_request, SignedRequest};

/// The private key (Ed25519 seed, P-256 scalar) every public-key source is configured with.
pub(crate) const SEED: [u8; 32] = [7; 32];
pub(crate) const SECRET: &str = "test-secret";
pub(crate) const SVIX_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub(crate) const PUBLIC_URL: &str = "https://hooks.example.com/webhooks/src";
/// The DER prefix of every P-256 SubjectPublicKeyInfo with an uncompressed point.
pub(crate) const P256_SPKI_HEADER: &str = "3059301306072a8648ce3d020106082a8648ce3d030107034200";
pub(crate) const VERIFY_TOKEN: &str = "verify-me";

/// Every built-in provider's canonical name (aliases left out), from the registry: a new
/// definition in `providers/` is covered without a change here.
pub(crate) fn providers() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let r = registry();
        r.names()
            .filter(|n| r.get(n).is_some_and(|d| d.name == *n))
            .map(str::to_owned)
            .collect()
    })
}

pub(crate) fn provider() -> impl Strategy<Value = String> {
    select(providers().to_vec())
}

/// A key as the definition's `[public_key]` says it is written.
pub(crate) fn encode_public(def: &ProviderDefinition, bytes: &[u8]) -> String {
    let spec = def.public_key.as_ref().expect("a public-key definition");
    spec.write(bytes).expect("a key in hex or base64")
}

/// A key `def` accepts: a public key when it takes only public keys, else a secret.
pub(crate) fn usable_key(def: &ProviderDefinition) -> Option<String> {
    match (def.asymmetric_algorithm(), &def.public_key) {
        (Some(alg), Some(spec)) if !def.takes_secrets() => {
            spec.write(&public_key_bytes(alg, &SEED))
        }
        _ => def.secret.write(b"secret"),
    }
}

/// The public key of `seed` for `algorithm`, as its raw bytes (Ed25519) or DER
/// SubjectPublicKeyInfo (P-256).
pub(crate) fn public_key_bytes(algorithm: Algorithm, seed: &[u8; 32]) -> Vec<u8> {
    match algorithm {
        Algorithm::Ed25519 => ed25519_dalek::SigningKey::from_bytes(seed)
            .verifying_key()
            .to_bytes()
            .to_vec(),
        Algorithm::EcdsaP256Sha256 => {
            let key = p256::ecdsa::SigningKey::from_bytes(&(*seed).into()).expect("a scalar");
            let point = key.verifying_key().to_encoded_point(false);
            // SubjectPublicKeyInfo: the fixed id-ecPublicKey/prime256v1 header, then the
            // uncompressed point.
            let mut der = hex::decode(P256_SPKI_HEADER).expect("hex");
            der.extend_from_slice(point.as_bytes());
            der
        }
        other => panic!("{other:?} has no public key"),
    }
}

/// A source of `name` as a user configures one. `public_key`: for a provider taking both
/// secrets and public keys (Standard Webhooks), configure the public key.
pub(crate) fn source(name: &str, public_key: bool) -> SourceVerifier {
    let def = definition(name);
    let verifier = match hookgate::verify::test_key_pair(&def, &SEED) {
        Some((public, private)) if public_key || !def.takes_secrets() => {
            SourceVerifier::new(def, &[&public])
                .expect("a valid public key")
                .with_signing_key(&private)
                .expect("a valid private key")
        }
        _ => {
            let secret = if def.secret.strip_prefix == "whsec_" {
                SVIX_SECRET
            } else {
                SECRET
            };
            SourceVerifier::new(def, &[secret]).expect("a usable secret")
        }
    };
    let verifier = if verifier.definition().needs_public_url() {
        verifier.with_public_url(PUBLIC_URL).expect("a valid URL")
    } else {
        verifier
    };
    if verifier.definition().needs_verify_token() {
        verifier.with_verify_token(VERIFY_TOKEN)
    } else {
        verifier
    }
}

/// A request `hookgate send` signs for `verifier` at `NOW`, its body carrying `filler`.
pub(crate) fn signed_request(verifier: &SourceVerifier, id: &str, filler: &str) -> SignedRequest {
    let body = sample_body(verifier, id, "test.event");
    let mut doc: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    let object = match &mut doc {
        serde_json::Value::Array(items) => &mut items[0],
        other => other,
    };
    object["pad"] = serde_json::Value::String(filler.to_owned());
    let body = serde_json::to_vec(&doc).expect("JSON");
    sign_request(verifier, body, id, "test.event", NOW)
        .unwrap_or_else(|e| panic!("{}: {e}", verifier.provider_name()))
}

/// A POST of `headers` and `body` to a webhook URL with `query`, before verification.
pub(crate) fn post(headers: &RequestHeaders, body: &[u8], query: &str) -> Unverified {
    Unverified::new(headers.clone(), Bytes::copy_from_slice(body)).with_target("POST", query)
}

pub(crate) fn verify_signed(
    verifier: &SourceVerifier,
    headers: &RequestHeaders,
    body: &[u8],
    query: &str,
) -> Result<Verified, VerifyError> {
    post(headers, body, query).verify(verifier, NOW)
}

/// The request with the header `name` (every occurrence) set to `value`.
pub(crate) fn with_header(headers: &RequestHeaders, name: &str, value: &str) -> RequestHeaders {
    let mut out = RequestHeaders::new();
    let mut set = false;
    for (n, v) in headers.iter() {
        if n.eq_ignore_ascii_case(name) {
            if !set {
                out.push(n, value.to_owned());
                set = true;
            }
        } else {
            out.push(n, v.to_owned());
        }
    }
    if !set {
        out.push(name, value.to_owned());
    }
    out
}

/// The body with the string at `pointer` replaced by `value`, made where absent.
pub(crate) fn with_body_field(body: &[u8], pointer: &str, value: serde_json::Value) -> Vec<u8> {
    let mut doc: serde_json::Value = serde_json::from_slice(body).expect("a JSON body");
    *doc.pointer_mut(pointer).expect("the field exists") = value;
    serde_json::to_vec(&doc).expect("JSON")
}

/// Every header name a definition reads (signature, timestamp, ids, types, signed values,
/// handshakes), read from its file: the timestamp's locations are not exported.
pub(crate) fn header_names(name: &str) -> Vec<String> {
    let def = definition(name);
    let text = definition_texts()
        .iter()
        .find(|(_, t)| parse_definition("x.toml", t).is_ok_and(|d| d.name == def.name))
        .map(|(_, t)| t.as_str())
        .unwrap_or_default();
    let mut names: Vec<String> = def.signature.headers().to_vec();
    names.push("content-type".into());
    for (at, _) in text.match_indices("header:") {
        let rest = &text[at + "header:".len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(rest.len());
        if end > 0 {
            names.push(rest[..end].to_ascii_lowercase());
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Whether a change to the body must break the signature: the body is signed (directly, or
/// through Twilio's `bodySHA256`), and no token stands in for a signature.
pub(crate) fn body_is_signed(def: &ProviderDefinition) -> bool {
    def.signature.algorithm != Algorithm::Token && !def.signature.unsigned_body
}
