//! Arbitrary bytes → every built-in provider's signature-header parser, then a full
//! verification against a fixed verifier.
//!
//! Input layout: `[provider, flags, sig-header 0x00 timestamp 0x00 id 0x00 body...]`.
//! - `provider % 6` picks the built-in definition.
//! - flags bit 0: replace `{sig}` in the signature header with the correct encoded MAC of the
//!   request as the verifier will read it, so the fuzzer gets past the MAC and explores the
//!   timestamp, JSON and id handling; bit 1: send the signature header twice; bit 2: use the
//!   `svix-*` header names for Standard Webhooks.
//!
//! Checked: nothing panics; a parsed header only yields candidates that are written in it;
//! and a request is accepted only if its signature header holds the true MAC of what the
//! verifier checked.

#![no_main]

use std::sync::OnceLock;

use base64::Engine as _;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use hookgate::verify::{
    parse_signature_header, Algorithm, Encoding, ProviderDefinition, ProviderRegistry,
    RequestHeaders, SourceVerifier, Unverified,
};
use libfuzzer_sys::fuzz_target;

const NOW: i64 = 1_700_000_000;
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

struct Provider {
    name: &'static str,
    definition: ProviderDefinition,
    verifier: SourceVerifier,
    key: Vec<u8>,
}

fn providers() -> &'static [Provider] {
    static PROVIDERS: OnceLock<Vec<Provider>> = OnceLock::new();
    PROVIDERS.get_or_init(|| {
        let registry = ProviderRegistry::builtin().expect("built-in definitions parse");
        [
            "stripe",
            "github",
            "slack",
            "shopify",
            "standard-webhooks",
            "hmac-sha256",
        ]
        .into_iter()
        .map(|name| {
            let definition = registry.get(name).unwrap().as_ref().clone();
            let verifier = SourceVerifier::new(definition.clone(), &[SECRET]).unwrap();
            // Standard Webhooks decodes the base64 after `whsec_`; the others use the string.
            let key = if name == "standard-webhooks" {
                base64::engine::general_purpose::STANDARD
                    .decode(SECRET.trim_start_matches("whsec_"))
                    .unwrap()
            } else {
                SECRET.as_bytes().to_vec()
            };
            Provider {
                name,
                definition,
                verifier,
                key,
            }
        })
        .collect()
    })
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// The bytes each provider signs, written from its documentation.
fn signed_payload(name: &str, body: &[u8], ts: &str, id: &str) -> Vec<u8> {
    let prefix = match name {
        "stripe" => format!("{ts}."),
        "slack" => format!("v0:{ts}:"),
        "standard-webhooks" => format!("{id}.{ts}."),
        _ => String::new(),
    };
    [prefix.as_bytes(), body].concat()
}

fn encode(encoding: Encoding, mac: &[u8]) -> String {
    match encoding {
        Encoding::Hex => hex::encode(mac),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(mac),
        Encoding::Text => String::from_utf8_lossy(mac).into_owned(),
    }
}

/// Candidates must be written in the header value.
fn check_parsed(def: &ProviderDefinition, value: &str) {
    let spec = &def.signature;
    let (format, encoding) = (&spec.format, spec.encoding);
    let Some(parsed) =
        parse_signature_header(format, &spec.prefix, spec.algorithm, encoding, value)
    else {
        return;
    };
    assert!(!parsed.candidates.is_empty());
    assert!(parsed.candidates.len() <= hookgate::verify::MAX_CANDIDATES);
    for c in parsed.candidates.iter().map(|c| &c.bytes) {
        let found = match encoding {
            Encoding::Hex => value.to_ascii_lowercase().contains(&hex::encode(c)),
            Encoding::Base64 => {
                value.contains(&base64::engine::general_purpose::STANDARD_NO_PAD.encode(c))
            }
            Encoding::Text => value.contains(&*String::from_utf8_lossy(c)),
        };
        assert!(found, "candidate {c:?} not in {value:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (selector, flags, rest) = (data[0], data[1], &data[2..]);
    let mut parts = rest.splitn(4, |b| *b == 0);
    // Header values reach the verifier as lossily decoded UTF-8 (src/http/ingest.rs).
    let mut text = || String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let (sig_template, ts, id) = (text(), text(), text());
    let body = parts.next().unwrap_or_default().to_vec();

    // Every parser sees the raw header text.
    for p in providers() {
        check_parsed(&p.definition, &sig_template);
    }

    let p = &providers()[usize::from(selector) % providers().len()];
    let spec = &p.definition.signature;
    let svix_names = flags & 4 != 0;
    let (ts_header, id_header, sig_header) = match p.name {
        "standard-webhooks" if svix_names => ("svix-timestamp", "svix-id", "svix-signature"),
        "standard-webhooks" => ("webhook-timestamp", "webhook-id", "webhook-signature"),
        "slack" => (
            "x-slack-request-timestamp",
            "x-slack-id",
            spec.headers()[0].as_str(),
        ),
        "github" => ("x-ts", "x-github-delivery", spec.headers()[0].as_str()),
        "shopify" => ("x-ts", "x-shopify-webhook-id", spec.headers()[0].as_str()),
        "hmac-sha256" => ("x-ts", "x-webhook-id", spec.headers()[0].as_str()),
        _ => ("x-ts", "x-id", spec.headers()[0].as_str()),
    };
    // The timestamp the verifier will use: Stripe's comes from the header itself.
    let timestamp_of = |value: &str| -> String {
        if p.name == "stripe" {
            parse_signature_header(
                &spec.format,
                &spec.prefix,
                spec.algorithm,
                spec.encoding,
                value,
            )
            .and_then(|parsed| parsed.timestamp)
            .unwrap_or_default()
        } else {
            ts.clone()
        }
    };
    let value = if flags & 1 != 0 && sig_template.contains("{sig}") {
        let probe = sig_template.replace("{sig}", &encode(spec.encoding, &[0; 32]));
        let mac = hmac_sha256(
            &p.key,
            &signed_payload(p.name, &body, &timestamp_of(&probe), &id),
        );
        sig_template.replace("{sig}", &encode(spec.encoding, &mac))
    } else {
        sig_template.clone()
    };
    check_parsed(&p.definition, &value);

    let mut headers = RequestHeaders::new();
    headers.push(sig_header, value.clone());
    if flags & 2 != 0 {
        headers.push(sig_header, value.clone());
    }
    headers.push(ts_header, ts.clone());
    headers.push(id_header, id.clone());
    let result = Unverified::new(headers, Bytes::from(body.clone())).verify(&p.verifier, NOW);
    if result.is_ok() {
        assert!(flags & 2 == 0, "a repeated signature header was accepted");
        let truth = hmac_sha256(
            &p.key,
            &signed_payload(p.name, &body, &timestamp_of(&value), &id),
        );
        let candidates: Vec<Vec<u8>> = parse_signature_header(
            &spec.format,
            &spec.prefix,
            Algorithm::HmacSha256,
            spec.encoding,
            &value,
        )
        .map(|parsed| parsed.candidates.into_iter().map(|c| c.bytes).collect())
        .unwrap_or_default();
        assert!(
            candidates.contains(&truth),
            "{} accepted {value:?} without the true MAC",
            p.name
        );
    }
});
