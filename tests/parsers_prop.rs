//! Property tests over the parsers that see untrusted or operator-written text: every
//! signature-header format, the provider-definition parser and the signed-payload template
//! parser. No input may panic, and a signature is accepted only when the header really holds
//! the MAC of what was signed.
//!
//! The signers here are written from the providers' documentation, independently of
//! `src/verify`. Case counts are kept moderate (see `CASES`) so the file runs in seconds; the
//! fuzz targets in `fuzz/` (docs/FUZZING.md) search the same parsers for much longer.

use std::sync::OnceLock;

use base64::Engine as _;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use hookgate::verify::{
    parse_definition, parse_signature_header, Encoding, Location, PayloadTemplate,
    ProviderDefinition, ProviderRegistry, RequestHeaders, SignatureFormat, SourceVerifier,
    Unverified, Verified, VerifyError,
};
use proptest::prelude::*;
use proptest::sample::select;

const CASES: u32 = 256;
/// The receiver's clock in every case: a fixed "now", so runs are reproducible.
const NOW: i64 = 1_700_000_000;
const TOLERANCE: i64 = 300;

fn config() -> ProptestConfig {
    ProptestConfig {
        // `PROPTEST_CASES=N` still asks for a longer run.
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(CASES),
        // No regression files beside the sources: a failure prints its minimal input.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------
// The built-in definitions, and independent signers for each.

fn registry() -> &'static ProviderRegistry {
    static REGISTRY: OnceLock<ProviderRegistry> = OnceLock::new();
    REGISTRY.get_or_init(|| ProviderRegistry::builtin().expect("built-in definitions parse"))
}

fn definition(name: &str) -> ProviderDefinition {
    registry()
        .get(name)
        .unwrap_or_else(|| panic!("no built-in provider {name}"))
        .as_ref()
        .clone()
}

/// The canonical built-in provider names.
const PROVIDERS: [&str; 6] = [
    "stripe",
    "github",
    "slack",
    "shopify",
    "standard-webhooks",
    "hmac-sha256",
];

/// The definition texts shipped in `providers/`, for mutation.
const DEFINITION_TEXTS: [(&str, &str); 6] = [
    ("stripe.toml", include_str!("../providers/stripe.toml")),
    ("github.toml", include_str!("../providers/github.toml")),
    ("slack.toml", include_str!("../providers/slack.toml")),
    ("shopify.toml", include_str!("../providers/shopify.toml")),
    (
        "standard-webhooks.toml",
        include_str!("../providers/standard-webhooks.toml"),
    ),
    (
        "hmac-sha256.toml",
        include_str!("../providers/hmac-sha256.toml"),
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Stripe,
    Github,
    Slack,
    Shopify,
    Svix,
    Generic,
}

const KINDS: [Kind; 6] = [
    Kind::Stripe,
    Kind::Github,
    Kind::Slack,
    Kind::Shopify,
    Kind::Svix,
    Kind::Generic,
];

impl Kind {
    fn provider(self) -> &'static str {
        match self {
            Kind::Stripe => "stripe",
            Kind::Github => "github",
            Kind::Slack => "slack",
            Kind::Shopify => "shopify",
            Kind::Svix => "standard-webhooks",
            Kind::Generic => "hmac-sha256",
        }
    }

    fn base64(self) -> bool {
        matches!(self, Kind::Shopify | Kind::Svix)
    }

    fn signature_header(self) -> &'static str {
        match self {
            Kind::Stripe => "stripe-signature",
            Kind::Github => "x-hub-signature-256",
            Kind::Slack => "x-slack-signature",
            Kind::Shopify => "x-shopify-hmac-sha256",
            Kind::Svix => "webhook-signature",
            Kind::Generic => "x-signature",
        }
    }

    /// The bytes the provider MACs.
    fn signed_payload(self, body: &[u8], ts: &str, id: &str) -> Vec<u8> {
        let prefix = match self {
            Kind::Stripe => format!("{ts}."),
            Kind::Slack => format!("v0:{ts}:"),
            Kind::Svix => format!("{id}.{ts}."),
            Kind::Github | Kind::Shopify | Kind::Generic => String::new(),
        };
        let mut out = prefix.into_bytes();
        out.extend_from_slice(body);
        out
    }

    fn encode(self, mac: &[u8]) -> String {
        if self.base64() {
            base64::engine::general_purpose::STANDARD.encode(mac)
        } else {
            hex::encode(mac)
        }
    }

    /// The signature header's value around an encoded signature.
    fn wrap(self, ts: &str, sig: &str) -> String {
        match self {
            Kind::Stripe => format!("t={ts},v1={sig}"),
            Kind::Github => format!("sha256={sig}"),
            Kind::Slack => format!("v0={sig}"),
            Kind::Svix => format!("v1,{sig}"),
            Kind::Shopify | Kind::Generic => sig.to_owned(),
        }
    }
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// A secret as configured, and the MAC key bytes it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Secret {
    configured: String,
    key: Vec<u8>,
}

fn secret_for(kind: Kind, raw: &[u8]) -> Secret {
    match kind {
        // Standard Webhooks: `whsec_` + base64 of the key bytes.
        Kind::Svix => Secret {
            configured: format!(
                "whsec_{}",
                base64::engine::general_purpose::STANDARD.encode(raw)
            ),
            key: raw.to_vec(),
        },
        // Everyone else uses the secret string's UTF-8 bytes (Stripe's `whsec_` included).
        _ => {
            let s: String = raw.iter().map(|b| char::from(b'!' + b % 94)).collect();
            Secret {
                key: s.clone().into_bytes(),
                configured: s,
            }
        }
    }
}

/// A correctly signed request.
#[derive(Debug, Clone)]
struct Signed {
    kind: Kind,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    ts: String,
    id: String,
    key: Vec<u8>,
}

impl Signed {
    fn new(kind: Kind, secret: &Secret, id: &str, ts: i64, filler: &[u8]) -> Self {
        let ts = ts.to_string();
        let pad = String::from_utf8_lossy(filler).into_owned();
        let body = match kind {
            Kind::Stripe => serde_json::to_vec(&serde_json::json!({"id": id, "pad": pad})),
            Kind::Slack => serde_json::to_vec(
                &serde_json::json!({"type": "event_callback", "event_id": id, "pad": pad}),
            ),
            // Not JSON (0xff never starts JSON), so the generic provider takes the header id.
            Kind::Generic => Ok([&[0xff][..], filler].concat()),
            Kind::Github | Kind::Shopify | Kind::Svix => Ok(filler.to_vec()),
        }
        .unwrap();
        let mac = hmac_sha256(&secret.key, &kind.signed_payload(&body, &ts, id));
        let value = kind.wrap(&ts, &kind.encode(&mac));
        let mut headers = vec![(kind.signature_header().to_owned(), value)];
        let extra: &[(&str, &str)] = match kind {
            Kind::Stripe => &[],
            Kind::Github => &[("x-github-delivery", id), ("x-github-event", "push")],
            Kind::Slack => &[("x-slack-request-timestamp", &ts)],
            Kind::Shopify => &[("x-shopify-webhook-id", id)],
            Kind::Svix => &[("webhook-id", id), ("webhook-timestamp", &ts)],
            Kind::Generic => &[("x-webhook-id", id)],
        };
        headers.extend(
            extra
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned())),
        );
        Self {
            kind,
            headers,
            body,
            ts,
            id: id.to_owned(),
            key: secret.key.clone(),
        }
    }

    fn signature_value(&self) -> &str {
        &self.headers[0].1
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn verify(&self, verifier: &SourceVerifier) -> Result<Verified, VerifyError> {
        let headers: RequestHeaders = self.headers.iter().cloned().collect();
        Unverified::new(headers, Bytes::from(self.body.clone())).verify(verifier, NOW)
    }

    /// The MAC the verifier must find in the header for this request as it now is: over the
    /// timestamp and id the verifier reads from its (possibly mutated) headers.
    fn true_mac(&self) -> Option<Vec<u8>> {
        let def = definition(self.kind.provider());
        let ts = match self.kind {
            Kind::Stripe => parse_signature_header(
                &def.signature.format,
                def.signature.encoding,
                self.signature_value(),
            )?
            .timestamp
            .unwrap_or_default(),
            Kind::Slack => self.header("x-slack-request-timestamp")?.to_owned(),
            Kind::Svix => self.header("webhook-timestamp")?.to_owned(),
            _ => String::new(),
        };
        let id = match self.kind {
            Kind::Svix => self.header("webhook-id")?.to_owned(),
            _ => String::new(),
        };
        Some(hmac_sha256(
            &self.key,
            &self.kind.signed_payload(&self.body, &ts, &id),
        ))
    }

    /// The candidates the header parser finds in the (possibly mutated) signature header.
    fn candidates(&self) -> Vec<Vec<u8>> {
        let def = definition(self.kind.provider());
        parse_signature_header(
            &def.signature.format,
            def.signature.encoding,
            self.signature_value(),
        )
        .map(|p| p.candidates)
        .unwrap_or_default()
    }
}

fn verifier(kind: Kind, secrets: &[Secret]) -> SourceVerifier {
    let configured: Vec<&str> = secrets.iter().map(|s| s.configured.as_str()).collect();
    SourceVerifier::new(definition(kind.provider()), &configured).expect("usable secrets")
}

// ---------------------------------------------------------------------------------------
// Strategies.

fn kind() -> impl Strategy<Value = Kind> {
    select(KINDS.to_vec())
}

/// Provider event ids: printable ASCII without spaces, so the stored id is the id sent.
fn event_id() -> impl Strategy<Value = String> {
    "[!-~]{1,64}"
}

fn raw_secret() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 1..48)
}

fn filler() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..256)
}

/// Characters worth inserting into a signature header: separators, digits of both
/// encodings, key letters, whitespace, padding, a control and a multi-byte character.
fn header_char() -> impl Strategy<Value = char> {
    prop_oneof![
        select(
            ",=; \t.:+/-_0123456789abcdefABCDEFtvTVsSha\u{0}é"
                .chars()
                .collect::<Vec<_>>()
        ),
        any::<char>(),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    Insert(usize, char),
    Delete(usize),
    Replace(usize, char),
    Duplicate(usize, usize),
    /// ASCII upper-casing of one character (hex digits keep their value).
    Upper(usize),
    /// Text added at the end: often harmless (an unknown key or version, spaces).
    Append(&'static str),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => (any::<usize>(), header_char()).prop_map(|(i, c)| Mutation::Insert(i, c)),
        1 => any::<usize>().prop_map(Mutation::Delete),
        1 => (any::<usize>(), header_char()).prop_map(|(i, c)| Mutation::Replace(i, c)),
        1 => (any::<usize>(), 1usize..40).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
        2 => any::<usize>().prop_map(Mutation::Upper),
        2 => select(vec![
            ",v0=abcd", ", v1=00", " v1a,QUFB", " v2,QUFB", ",", " ", "=", ",t=1", " v1,", "\t",
        ])
        .prop_map(Mutation::Append),
    ]
}

fn apply(s: &str, m: &Mutation) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    let len = chars.len();
    match *m {
        Mutation::Insert(i, c) => chars.insert(i % (len + 1), c),
        Mutation::Delete(i) if len > 0 => {
            chars.remove(i % len);
        }
        Mutation::Replace(i, c) if len > 0 => chars[i % len] = c,
        Mutation::Upper(i) if len > 0 => chars[i % len] = chars[i % len].to_ascii_uppercase(),
        Mutation::Append(text) => chars.extend(text.chars()),
        Mutation::Duplicate(i, n) if len > 0 => {
            let start = i % len;
            let end = (start + n).min(len);
            let copy: Vec<char> = chars[start..end].to_vec();
            chars.splice(end..end, copy);
        }
        _ => {}
    }
    chars.into_iter().collect()
}

/// Every signature format a definition can express, with arbitrary (even empty) separators
/// and keys: `parse_signature_header` is public and must hold up for any of them.
fn any_format() -> impl Strategy<Value = SignatureFormat> {
    let small = || "[,=; :a-z0-9]{0,3}";
    let keys = || proptest::collection::vec("[a-z0-9=,]{0,3}", 0..3);
    prop_oneof![
        small().prop_map(|prefix| SignatureFormat::Raw { prefix }),
        (
            small(),
            small(),
            keys(),
            proptest::option::of("[a-z0-9=,]{0,3}")
        )
            .prop_map(|(p, k, s, t)| SignatureFormat::KeyValue {
                pair_separator: p,
                kv_separator: k,
                signature_keys: s,
                timestamp_key: t,
            }),
        (small(), small(), keys()).prop_map(|(l, i, v)| SignatureFormat::List {
            list_separator: l,
            item_separator: i,
            versions: v,
        }),
    ]
}

fn encoding() -> impl Strategy<Value = Encoding> {
    select(vec![Encoding::Hex, Encoding::Base64])
}

/// Header values shaped like signature headers, so the parser's inner branches are reached.
fn header_like() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[tv01=, a-fA-F0-9]{0,120}",
        "(t=[0-9]{0,12},)?(v[01]=[0-9a-f]{0,70},?){0,4}",
        "(v1a?,[A-Za-z0-9+/=]{0,48} ?){0,4}",
        "(sha256=|v0=)?[0-9a-fA-F]{0,70}",
        "[A-Za-z0-9+/=\\- _]{0,60}",
    ]
}

// ---------------------------------------------------------------------------------------
// Header parsers: no panics, and only what the header holds comes out.

fn b64_unpadded(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes)
}

/// Whatever the parser returns must be written in the header: each candidate's canonical
/// encoding appears in the value, and a timestamp appears after its key.
fn check_parsed_against_value(format: &SignatureFormat, encoding: Encoding, value: &str) {
    let Some(parsed) = parse_signature_header(format, encoding, value) else {
        return;
    };
    assert!(
        !parsed.candidates.is_empty(),
        "Some(..) with no candidates for {value:?}"
    );
    for c in &parsed.candidates {
        let found = match encoding {
            Encoding::Hex => value.to_ascii_lowercase().contains(&hex::encode(c)),
            Encoding::Base64 => value.contains(&b64_unpadded(c)),
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
    fn builtin_header_parsers_never_panic(provider in select(PROVIDERS.to_vec()), value in header_like()) {
        let def = definition(provider);
        check_parsed_against_value(&def.signature.format, def.signature.encoding, &value);
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

// ---------------------------------------------------------------------------------------
// Every correctly signed request verifies; nothing verifies without the true MAC.

proptest! {
    #![proptest_config(config())]

    /// Signed correctly with one of several secrets, at a time within the tolerance: accepted,
    /// with the id that was sent and the index of the first secret that matches.
    #[test]
    fn every_correct_signature_verifies(
        kind in kind(),
        raw_secrets in proptest::collection::vec(raw_secret(), 1..4),
        which in any::<prop::sample::Index>(),
        id in event_id(),
        offset in -TOLERANCE..=TOLERANCE,
        body in filler(),
    ) {
        let secrets: Vec<Secret> = raw_secrets.iter().map(|r| secret_for(kind, r)).collect();
        let k = which.index(secrets.len());
        let signed = Signed::new(kind, &secrets[k], &id, NOW + offset, &body);
        let expected_index = secrets.iter().position(|s| s.key == secrets[k].key).unwrap();
        match signed.verify(&verifier(kind, &secrets)) {
            Ok(Verified::Event(event)) => {
                prop_assert_eq!(event.provider_event_id().as_str(), id.as_str());
                prop_assert_eq!(event.secret_index(), expected_index);
                prop_assert_eq!(&event.body()[..], &signed.body[..]);
                prop_assert_eq!(event.scheme(), kind.provider());
            }
            other => prop_assert!(false, "{:?} refused: {:?}", kind, other),
        }
    }

    /// Correctly signed, but outside the tolerance (either direction): refused for the
    /// timestamp alone.
    #[test]
    fn correct_signature_outside_the_tolerance_is_refused(
        kind in select(vec![Kind::Stripe, Kind::Slack, Kind::Svix]),
        id in event_id(),
        offset in prop_oneof![(TOLERANCE + 1)..1_000_000_000i64, -NOW..-TOLERANCE],
        body in filler(),
    ) {
        let secret = secret_for(kind, b"tolerance");
        let signed = Signed::new(kind, &secret, &id, NOW + offset, &body);
        let result = signed.verify(&verifier(kind, &[secret]));
        prop_assert_eq!(result.err(), Some(VerifyError::TimestampOutOfTolerance(TOLERANCE)));
    }

    /// One character of the encoded MAC changed to another character of its alphabet (for
    /// hex, a different digit, not merely another case): always refused.
    #[test]
    fn one_changed_signature_character_is_refused(
        kind in kind(),
        id in event_id(),
        body in filler(),
        at in any::<prop::sample::Index>(),
        step in 1usize..16,
    ) {
        let secret = secret_for(kind, b"one-char");
        let mut signed = Signed::new(kind, &secret, &id, NOW, &body);
        let mac = hmac_sha256(&secret.key, &kind.signed_payload(&signed.body, &signed.ts, &signed.id));
        let sig = kind.encode(&mac);
        let data_len = sig.trim_end_matches('=').len();
        let i = at.index(data_len);
        let alphabet: Vec<char> = if kind.base64() {
            ('A'..='Z').chain('a'..='z').chain('0'..='9').chain(['+', '/']).collect()
        } else {
            ('0'..='9').chain('a'..='f').collect()
        };
        let old = sig[i..=i].chars().next().unwrap();
        let pos = alphabet.iter().position(|&c| c == old).unwrap();
        let new = alphabet[(pos + step) % alphabet.len()];
        let mutated = format!("{}{new}{}", &sig[..i], &sig[i + 1..]);
        prop_assert_ne!(&mutated, &sig);
        signed.headers[0].1 = kind.wrap(&signed.ts, &mutated);
        let result = signed.verify(&verifier(kind, &[secret]));
        prop_assert!(
            matches!(result, Err(VerifyError::InvalidSignature | VerifyError::MalformedSignature(_))),
            "{:?} accepted a changed signature {:?}: {:?}", kind, signed.headers[0].1, result
        );
    }

    /// Arbitrary edits anywhere in a signed request's headers: whenever verification still
    /// succeeds, the (edited) signature header really holds the MAC of what the verifier
    /// checked (the timestamp and id as they now are). Mutations that keep the MAC intact
    /// (a space after a comma, upper-case hex, dropped base64 padding) may pass; nothing else.
    #[test]
    fn acceptance_implies_the_true_mac_is_present(
        kind in kind(),
        id in event_id(),
        body in filler(),
        target in any::<prop::sample::Index>(),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        let secret = secret_for(kind, b"mutations");
        let mut signed = Signed::new(kind, &secret, &id, NOW, &body);
        // The signature header most of the time, the others (timestamp, id) too.
        let t = if target.index(4) == 0 { target.index(signed.headers.len()) } else { 0 };
        for m in &mutations {
            signed.headers[t].1 = apply(&signed.headers[t].1, m);
        }
        if let Ok(verified) = signed.verify(&verifier(kind, std::slice::from_ref(&secret))) {
            let truth = signed.true_mac().expect("an accepted request has its signed values");
            prop_assert!(
                signed.candidates().contains(&truth),
                "{:?} accepted {:?} without the true MAC: {:?}", kind, signed.headers, verified
            );
        }
    }

    /// Decoys next to the real signature (rotation, several versions): accepted through the
    /// real one, refused when it is left out.
    #[test]
    fn decoys_alone_are_refused_and_with_the_real_one_accepted(
        kind in select(vec![Kind::Stripe, Kind::Svix]),
        id in event_id(),
        body in filler(),
        decoys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 32), 1..4),
        at in any::<prop::sample::Index>(),
    ) {
        let secret = secret_for(kind, b"decoys");
        let mut signed = Signed::new(kind, &secret, &id, NOW, &body);
        let real = hmac_sha256(&secret.key, &kind.signed_payload(&signed.body, &signed.ts, &signed.id));
        prop_assume!(!decoys.contains(&real));
        let v = verifier(kind, std::slice::from_ref(&secret));
        let value = |sigs: &[Vec<u8>]| match kind {
            Kind::Stripe => std::iter::once(format!("t={}", signed.ts))
                .chain(sigs.iter().map(|s| format!("v1={}", hex::encode(s))))
                .collect::<Vec<_>>()
                .join(","),
            _ => sigs
                .iter()
                .map(|s| format!("v1,{}", kind.encode(s)))
                .collect::<Vec<_>>()
                .join(" "),
        };
        signed.headers[0].1 = value(&decoys);
        prop_assert_eq!(signed.verify(&v).err(), Some(VerifyError::InvalidSignature));
        let mut with_real = decoys.clone();
        with_real.insert(at.index(decoys.len() + 1), real);
        signed.headers[0].1 = value(&with_real);
        prop_assert!(signed.verify(&v).is_ok(), "refused {:?}", signed.headers[0].1);
    }

    /// The same request verified against secrets that did not sign it: refused.
    #[test]
    fn other_secrets_are_refused(
        kind in kind(),
        signing in raw_secret(),
        others in proptest::collection::vec(raw_secret(), 1..4),
        id in event_id(),
        body in filler(),
    ) {
        let signing = secret_for(kind, &signing);
        let others: Vec<Secret> = others.iter().map(|r| secret_for(kind, r)).collect();
        prop_assume!(others.iter().all(|o| o.key != signing.key));
        let signed = Signed::new(kind, &signing, &id, NOW, &body);
        prop_assert_eq!(signed.verify(&verifier(kind, &others)).err(), Some(VerifyError::InvalidSignature));
    }
}

// ---------------------------------------------------------------------------------------
// The provider-definition parser.

/// A definition that parsed must be internally consistent and usable.
fn check_definition(def: ProviderDefinition, value: &str, body: &[u8]) {
    assert!(!def.name.is_empty());
    assert!(!def.signature.headers.is_empty());
    for h in &def.signature.headers {
        assert_eq!(h, &h.to_ascii_lowercase());
    }
    assert!(!def.event_id.is_empty());
    if let Some(ts) = &def.timestamp {
        assert!(ts.tolerance_seconds > 0);
        if format!("{:?}", ts.source).starts_with("Signature") {
            assert!(
                matches!(
                    def.signature.format,
                    SignatureFormat::KeyValue {
                        timestamp_key: Some(_),
                        ..
                    }
                ),
                "timestamp from the signature without a timestamp_key: {def:?}"
            );
        }
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
    // A secret valid in either secret encoding: "c2VjcmV0" ("secret" in base64) is also
    // plain UTF-8, after the definition's prefix.
    let mut names: Vec<String> = def.signature.headers.clone();
    for loc in def.event_id.iter().chain(&def.event_type) {
        if let Location::Header(h) = loc {
            names.push(h.clone());
        }
    }
    // Timestamp headers: those of the shipped definitions and of `generated_definition`.
    names.extend(
        ["webhook-timestamp", "x-slack-request-timestamp", "x-ts"]
            .iter()
            .map(|s| (*s).to_owned()),
    );
    let secret = format!("{}c2VjcmV0", def.secret.strip_prefix);
    let verifier = SourceVerifier::new(def, &[&secret]).expect("a usable secret");
    let mut request = RequestHeaders::new();
    for name in &names {
        request.push(name, value);
    }
    let _ = Unverified::new(request, Bytes::copy_from_slice(body)).verify(&verifier, NOW);
}

#[derive(Debug, Clone)]
enum TextMutation {
    DeleteRange(usize, usize),
    Insert(usize, String),
    ReplaceLine(usize, usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
}

/// Lines from every shipped definition, to splice into another (key/value crossover).
fn definition_lines() -> Vec<&'static str> {
    DEFINITION_TEXTS
        .iter()
        .flat_map(|(_, t)| t.lines())
        .collect()
}

fn text_mutation() -> impl Strategy<Value = TextMutation> {
    let snippet = prop_oneof![
        any::<String>(),
        select(vec![
            "\"",
            "'",
            "[",
            "]",
            "[[",
            "]]",
            "=",
            "\n",
            "\n[signature]\n",
            "\n[timestamp]\n",
            "{",
            "}",
            "{body}",
            "{timestamp}",
            "{id}",
            "{header:X}",
            "{header:}",
            "-1",
            "0",
            "9223372036854775807",
            "-9223372036854775808",
            "\"kv\"",
            "\"list\"",
            "\"raw\"",
            "\"signature\"",
            "\"header:\"",
            "\"json:\"",
            "\"json:id\"",
            "[]",
            "\"\"",
            "#",
            "\\u0000",
            "\"\"\"",
        ])
        .prop_map(str::to_owned),
    ];
    prop_oneof![
        (any::<usize>(), 0usize..40).prop_map(|(a, n)| TextMutation::DeleteRange(a, n)),
        (any::<usize>(), snippet).prop_map(|(a, s)| TextMutation::Insert(a, s)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| TextMutation::ReplaceLine(a, b)),
        any::<usize>().prop_map(TextMutation::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| TextMutation::SwapLines(a, b)),
    ]
}

fn mutate_text(text: &str, m: &TextMutation) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    match m {
        TextMutation::DeleteRange(a, n) => {
            let start = a % (chars.len() + 1);
            let end = (start + n).min(chars.len());
            chars[..start].iter().chain(&chars[end..]).collect()
        }
        TextMutation::Insert(a, s) => {
            let at = a % (chars.len() + 1);
            let mut out: String = chars[..at].iter().collect();
            out.push_str(s);
            out.extend(&chars[at..]);
            out
        }
        TextMutation::ReplaceLine(a, b) if !lines.is_empty() => {
            let pool = definition_lines();
            let i = a % lines.len();
            lines[i] = pool[b % pool.len()].to_owned();
            lines.join("\n")
        }
        TextMutation::DuplicateLine(a) if !lines.is_empty() => {
            let i = a % lines.len();
            let line = lines[i].clone();
            lines.insert(i, line);
            lines.join("\n")
        }
        TextMutation::SwapLines(a, b) if !lines.is_empty() => {
            let (i, j) = (a % lines.len(), b % lines.len());
            lines.swap(i, j);
            lines.join("\n")
        }
        _ => text.to_owned(),
    }
}

/// `key = value` lines, each present or not.
fn opt_line(key: &'static str, value: BoxedStrategy<String>) -> BoxedStrategy<String> {
    proptest::option::of(value)
        .prop_map(move |v| v.map(|v| format!("{key} = {v}\n")).unwrap_or_default())
        .boxed()
}

fn quoted(regex: &'static str) -> BoxedStrategy<String> {
    regex.prop_map(|v| format!("{v:?}")).boxed()
}

fn string_list(regex: &'static str, len: std::ops::Range<usize>) -> BoxedStrategy<String> {
    proptest::collection::vec(regex, len)
        .prop_map(|v| format!("{v:?}"))
        .boxed()
}

/// The layout keys of `[signature]`: mostly a coherent raw, kv or list layout, sometimes any
/// mix of keys (including empty separators and an unknown format).
fn signature_layout() -> BoxedStrategy<String> {
    let raw = opt_line("prefix", quoted("[a-z0-9]{0,4}=?"))
        .prop_map(|p| format!("format = \"raw\"\n{p}"));
    let kv = (
        quoted("[,;]"),
        quoted("[=:]"),
        string_list("v[0-9]", 1..3),
        opt_line("timestamp_key", quoted("[a-z]{1,2}")),
    )
        .prop_map(|(ps, kvs, keys, tk)| {
            format!("format = \"kv\"\npair_separator = {ps}\nkv_separator = {kvs}\nsignature_keys = {keys}\n{tk}")
        });
    let list = (
        quoted("[ ;]"),
        quoted("[,=]"),
        string_list("v[0-9]a?", 1..3),
    )
        .prop_map(|(ls, is, v)| {
            format!(
                "format = \"list\"\nlist_separator = {ls}\nitem_separator = {is}\nversions = {v}\n"
            )
        });
    let junk = (
        opt_line("format", quoted("raw|kv|list|[a-z]{0,4}")),
        opt_line("prefix", quoted("[a-z0-9=]{0,5}")),
        opt_line("pair_separator", quoted("[,; =]{0,2}")),
        opt_line("kv_separator", quoted("[,; =]{0,2}")),
        opt_line("signature_keys", string_list("[a-z0-9]{0,3}", 0..3)),
        opt_line("timestamp_key", quoted("[a-z]{0,2}")),
        opt_line("list_separator", quoted("[,; ]{0,2}")),
        opt_line("item_separator", quoted("[,; ]{0,2}")),
        opt_line("versions", string_list("v[0-9a]{0,2}", 0..3)),
    )
        .prop_map(|(a, b, c, d, e, f, g, h, i)| format!("{a}{b}{c}{d}{e}{f}{g}{h}{i}"));
    prop_oneof![2 => raw, 2 => kv, 2 => list, 1 => junk].boxed()
}

fn signed_payload() -> BoxedStrategy<String> {
    prop_oneof![
        4 => select(vec![
            "{body}",
            "{timestamp}.{body}",
            "v0:{timestamp}:{body}",
            "{id}.{timestamp}.{body}",
            "{header:X-Extra}:{body}",
            "{body}{id}",
        ])
        .prop_map(str::to_owned),
        1 => "(\\{(body|timestamp|id|header:[A-Za-z-]{0,5}|[a-z]{0,4})\\}|[a-z.:]{0,3}){0,5}",
        1 => any::<String>(),
    ]
    .prop_map(|s| format!("{s:?}"))
    .boxed()
}

fn locations() -> BoxedStrategy<String> {
    let location = prop_oneof![
        4 => select(vec!["header:X-Id", "json:/id", "json:/data/id", "header:webhook-id"]).prop_map(str::to_owned),
        1 => "header:[A-Za-z-]{0,8}",
        1 => "json:/?[a-z/~01]{0,8}",
        1 => "[a-z:/]{0,8}",
    ]
    .prop_map(|s| format!("{s:?}"));
    prop_oneof![
        6 => proptest::collection::vec(location.clone(), 1..3),
        1 => proptest::collection::vec(location, 0..1),
    ]
    .prop_map(|v| format!("[{}]", v.join(", ")))
    .boxed()
}

/// Definitions assembled from pieces, mostly well-formed, to reach the validation past the
/// TOML layer (formats, separators, templates, timestamps, locations) and, when they parse,
/// a verification with them.
fn generated_definition() -> impl Strategy<Value = String> {
    let signature = (
        prop_oneof![4 => string_list("[A-Za-z-]{1,12}", 1..3), 1 => string_list("[A-Za-z-]{0,3}", 0..2)],
        prop_oneof![
            9 => Just("hmac-sha256"),
            1 => select(vec!["hmac-sha1", "hmac-sha512", "md5"])
        ],
        prop_oneof![9 => select(vec!["hex", "base64"]), 1 => Just("HEX")],
        opt_line("signed_payload", signed_payload()),
        signature_layout(),
    )
        .prop_map(|(headers, alg, enc, payload, layout)| {
            format!("[signature]\nheaders = {headers}\nalgorithm = {alg:?}\nencoding = {enc:?}\n{payload}{layout}")
        });
    let timestamp = proptest::option::of((
        prop_oneof![
            2 => Just("[\"signature\"]".to_owned()),
            2 => Just("[\"header:X-Ts\"]".to_owned()),
            1 => string_list("header:(X-Ts|webhook-timestamp|)|signature|json:/t", 0..3),
        ],
        prop_oneof![4 => Just(300i64), 1 => any::<i64>()],
    ))
    .prop_map(|t| {
        t.map(|(from, tol)| format!("[timestamp]\nfrom = {from}\ntolerance_seconds = {tol}\n"))
            .unwrap_or_default()
    });
    let secret = proptest::option::of((
        prop_oneof![9 => select(vec!["utf8", "base64"]), 1 => Just("hex")],
        "[a-z_]{0,6}",
    ))
    .prop_map(|s| {
        s.map(|(e, p)| format!("[secret]\nencoding = {e:?}\nstrip_prefix = {p:?}\n"))
            .unwrap_or_default()
    });
    (
        prop_oneof![19 => "[a-z-]{1,8}", 1 => Just(String::new())],
        signature,
        secret,
        timestamp,
        locations(),
        locations(),
        prop_oneof![
            12 => Just(None),
            4 => Just(Some("slack_url_verification")),
            1 => Just(Some("other")),
        ],
    )
        .prop_map(|(name, signature, secret, timestamp, id, ty, challenge)| {
            let challenge = challenge.map(|c| format!("challenge = {c:?}\n")).unwrap_or_default();
            format!("name = {name:?}\n{challenge}\n{signature}\n{secret}\n{timestamp}\n[event]\nid = {id}\ntype = {ty}\n")
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn definition_parser_never_panics_on_arbitrary_text(text in any::<String>()) {
        if let Err(e) = parse_definition("prop.toml", &text) {
            let _ = e.to_string();
        }
    }

    /// Shipped definitions with a few edits: parse or fail cleanly; a definition that parses
    /// is consistent and verifies a request without panicking.
    #[test]
    fn mutated_definitions_parse_or_fail_cleanly(
        which in any::<prop::sample::Index>(),
        mutations in proptest::collection::vec(text_mutation(), 1..4),
        value in header_like(),
        body in filler(),
    ) {
        let (origin, text) = DEFINITION_TEXTS[which.index(DEFINITION_TEXTS.len())];
        let mut text = text.to_owned();
        for m in &mutations {
            text = mutate_text(&text, m);
        }
        match parse_definition(origin, &text) {
            Ok(def) => check_definition(def, &value, &body),
            Err(e) => prop_assert!(e.to_string().contains(origin), "{}", e),
        }
    }

    /// Definitions assembled from pieces: the same, deeper into validation.
    #[test]
    fn generated_definitions_parse_or_fail_cleanly(text in generated_definition(), value in header_like(), body in filler()) {
        match parse_definition("gen.toml", &text) {
            Ok(def) => check_definition(def, &value, &body),
            Err(e) => prop_assert!(e.to_string().contains("gen.toml"), "{}", e),
        }
    }
}

#[test]
fn every_shipped_definition_passes_the_consistency_check() {
    for (origin, text) in DEFINITION_TEXTS {
        let def = parse_definition(origin, text).expect("shipped definitions parse");
        check_definition(def, "v1,AAAA", b"{}");
    }
}

// ---------------------------------------------------------------------------------------
// The signed-payload template parser.

/// An independent reading of the template rules: `{name}` placeholders must be closed and
/// be body, timestamp, id or header:<Name>; text outside them (a lone `}` included) is
/// literal; `{body}` must appear.
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

fn template_like() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        4 => select(vec!["{body}", "{timestamp}", "{id}", "{header:X-A}", ".", ":", "v0", "}", "é"])
            .prop_map(str::to_owned),
        1 => select(vec!["{", "{}", "{header:}", "{bod}", "{BODY}", "{ body}", "{header}", "{{body}}"])
            .prop_map(str::to_owned),
        1 => "[a-z.:{}]{0,3}",
    ];
    let parts = proptest::collection::vec(part, 0..6);
    prop_oneof![
        3 => (parts.clone(), any::<prop::sample::Index>()).prop_map(|(mut v, at)| {
            v.insert(at.index(v.len() + 1), "{body}".to_owned());
            v.concat()
        }),
        2 => parts.prop_map(|v| v.concat()),
        1 => any::<String>(),
        1 => "[{}a-z:]{0,16}",
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn template_parser_never_panics_and_follows_the_rules(s in template_like()) {
        let parsed = PayloadTemplate::parse(&s);
        prop_assert_eq!(parsed.is_ok(), template_is_valid(&s), "{:?}: {:?}", s, parsed);
        match &parsed {
            Err(message) => prop_assert!(!message.is_empty()),
            // Parsing is deterministic.
            Ok(_) => prop_assert_eq!(PayloadTemplate::parse(&s), parsed),
        }
    }
}
