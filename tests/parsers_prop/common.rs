//! What every group of properties shares: the proptest configuration, the built-in
//! definitions with an independent signer for each, and the strategies. The groups import all
//! of it, with the crates they use, by `use crate::common::*`.

pub(crate) use std::sync::OnceLock;

pub(crate) use base64::Engine as _;
pub(crate) use bytes::Bytes;
pub(crate) use hmac::{Hmac, Mac};
pub(crate) use hookgate::verify::{
    parse_definition, parse_signature_header, Algorithm, Encoding, Location, ProviderDefinition,
    ProviderRegistry, RequestHeaders, SignatureFormat, SourceVerifier, Template, TemplateKind,
    Unverified, Verified, VerifyError,
};
pub(crate) use proptest::prelude::*;
pub(crate) use proptest::sample::select;

pub(crate) const CASES: u32 = 256;
/// The receiver's clock in every case: a fixed "now", so runs are reproducible.
pub(crate) const NOW: i64 = 1_700_000_000;
pub(crate) const TOLERANCE: i64 = 300;

pub(crate) fn config() -> ProptestConfig {
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

pub(crate) fn registry() -> &'static ProviderRegistry {
    static REGISTRY: OnceLock<ProviderRegistry> = OnceLock::new();
    REGISTRY.get_or_init(|| ProviderRegistry::builtin().expect("built-in definitions parse"))
}

pub(crate) fn definition(name: &str) -> ProviderDefinition {
    registry()
        .get(name)
        .unwrap_or_else(|| panic!("no built-in provider {name}"))
        .as_ref()
        .clone()
}

/// The definition texts shipped in `providers/` (file name, text), read when the tests
/// start so that every definition there is mutated, not a hand-kept list.
pub(crate) fn definition_texts() -> &'static [(String, String)] {
    static TEXTS: OnceLock<Vec<(String, String)>> = OnceLock::new();
    TEXTS.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/providers");
        let mut texts: Vec<(String, String)> = std::fs::read_dir(dir)
            .expect("the providers directory")
            .map(|e| e.expect("a directory entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (
                    name,
                    std::fs::read_to_string(&p).expect("a definition file"),
                )
            })
            .collect();
        texts.sort();
        assert!(!texts.is_empty(), "no definitions in {dir}");
        texts
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Stripe,
    Github,
    Slack,
    Shopify,
    Svix,
    Generic,
}

pub(crate) const KINDS: [Kind; 6] = [
    Kind::Stripe,
    Kind::Github,
    Kind::Slack,
    Kind::Shopify,
    Kind::Svix,
    Kind::Generic,
];

impl Kind {
    pub(crate) fn provider(self) -> &'static str {
        match self {
            Kind::Stripe => "stripe",
            Kind::Github => "github",
            Kind::Slack => "slack",
            Kind::Shopify => "shopify",
            Kind::Svix => "standard-webhooks",
            Kind::Generic => "hmac-sha256",
        }
    }

    pub(crate) fn base64(self) -> bool {
        matches!(self, Kind::Shopify | Kind::Svix)
    }

    pub(crate) fn signature_header(self) -> &'static str {
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
    pub(crate) fn signed_payload(self, body: &[u8], ts: &str, id: &str) -> Vec<u8> {
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

    pub(crate) fn encode(self, mac: &[u8]) -> String {
        if self.base64() {
            base64::engine::general_purpose::STANDARD.encode(mac)
        } else {
            hex::encode(mac)
        }
    }

    /// The signature header's value around an encoded signature.
    pub(crate) fn wrap(self, ts: &str, sig: &str) -> String {
        match self {
            Kind::Stripe => format!("t={ts},v1={sig}"),
            Kind::Github => format!("sha256={sig}"),
            Kind::Slack => format!("v0={sig}"),
            Kind::Svix => format!("v1,{sig}"),
            Kind::Shopify | Kind::Generic => sig.to_owned(),
        }
    }
}

pub(crate) fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// A secret as configured, and the MAC key bytes it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Secret {
    pub(crate) configured: String,
    pub(crate) key: Vec<u8>,
}

pub(crate) fn secret_for(kind: Kind, raw: &[u8]) -> Secret {
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
pub(crate) struct Signed {
    pub(crate) kind: Kind,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    pub(crate) ts: String,
    pub(crate) id: String,
    pub(crate) key: Vec<u8>,
}

impl Signed {
    pub(crate) fn new(kind: Kind, secret: &Secret, id: &str, ts: i64, filler: &[u8]) -> Self {
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

    pub(crate) fn signature_value(&self) -> &str {
        &self.headers[0].1
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn verify(&self, verifier: &SourceVerifier) -> Result<Verified, VerifyError> {
        let headers: RequestHeaders = self.headers.iter().cloned().collect();
        Unverified::new(headers, Bytes::from(self.body.clone())).verify(verifier, NOW)
    }

    /// The MAC the verifier must find in the header for this request as it now is: over the
    /// timestamp and id the verifier reads from its (possibly mutated) headers.
    pub(crate) fn true_mac(&self) -> Option<Vec<u8>> {
        let def = definition(self.kind.provider());
        let ts = match self.kind {
            Kind::Stripe => parse_signature_header(
                &def.signature.format,
                &def.signature.prefix,
                def.signature.algorithm,
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
    pub(crate) fn candidates(&self) -> Vec<Vec<u8>> {
        let def = definition(self.kind.provider());
        parse_signature_header(
            &def.signature.format,
            &def.signature.prefix,
            def.signature.algorithm,
            def.signature.encoding,
            self.signature_value(),
        )
        .map(|p| p.candidates.into_iter().map(|c| c.bytes).collect())
        .unwrap_or_default()
    }
}

pub(crate) fn verifier(kind: Kind, secrets: &[Secret]) -> SourceVerifier {
    let configured: Vec<&str> = secrets.iter().map(|s| s.configured.as_str()).collect();
    SourceVerifier::new(definition(kind.provider()), &configured).expect("usable secrets")
}

// ---------------------------------------------------------------------------------------
// Strategies.

pub(crate) fn kind() -> impl Strategy<Value = Kind> {
    select(KINDS.to_vec())
}

/// Provider event ids: printable ASCII without spaces, so the stored id is the id sent.
pub(crate) fn event_id() -> impl Strategy<Value = String> {
    "[!-~]{1,64}"
}

pub(crate) fn raw_secret() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 1..48)
}

pub(crate) fn filler() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..256)
}

/// Characters worth inserting into a signature header: separators, digits of both
/// encodings, key letters, whitespace, padding, a control and a multi-byte character.
pub(crate) fn header_char() -> impl Strategy<Value = char> {
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
pub(crate) enum Mutation {
    Insert(usize, char),
    Delete(usize),
    Replace(usize, char),
    Duplicate(usize, usize),
    /// ASCII upper-casing of one character (hex digits keep their value).
    Upper(usize),
    /// Text added at the end: often harmless (an unknown key or version, spaces).
    Append(&'static str),
}

pub(crate) fn mutation() -> impl Strategy<Value = Mutation> {
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

pub(crate) fn apply(s: &str, m: &Mutation) -> String {
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

/// Every signature format a definition can express, with arbitrary (even empty) separators,
/// keys and prefix: `parse_signature_header` is public and must hold up for any of them.
pub(crate) fn any_format() -> impl Strategy<Value = (SignatureFormat, String)> {
    (any_layout(), "[,=; :a-z0-9]{0,3}")
}

fn any_layout() -> impl Strategy<Value = SignatureFormat> {
    let small = || "[,=; :a-z0-9]{0,3}";
    let keys = || proptest::collection::vec("[a-z0-9=,]{0,3}", 0..3);
    let versions = || {
        proptest::collection::vec(
            (
                "[a-z0-9=,]{0,3}",
                select(vec![Algorithm::HmacSha256, Algorithm::Ed25519]),
            ),
            0..3,
        )
    };
    prop_oneof![
        Just(SignatureFormat::Raw),
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
        (small(), small(), versions()).prop_map(|(l, i, v)| SignatureFormat::List {
            list_separator: l,
            item_separator: i,
            versions: v,
        }),
    ]
}

pub(crate) fn encoding() -> impl Strategy<Value = Encoding> {
    select(vec![Encoding::Hex, Encoding::Base64])
}

/// Header values shaped like signature headers, so the parser's inner branches are reached.
pub(crate) fn header_like() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[tv01=, a-fA-F0-9]{0,120}",
        "(t=[0-9]{0,12},)?(v[01]=[0-9a-f]{0,70},?){0,4}",
        "(v1a?,[A-Za-z0-9+/=]{0,48} ?){0,4}",
        "(sha256=|v0=)?[0-9a-fA-F]{0,70}",
        "[A-Za-z0-9+/=\\- _]{0,60}",
    ]
}
