//! Signing a request exactly as a source's provider would: the inverse of `verify`, for
//! `hookgate send` (a "send test event" button) and for tests.

use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use super::definition::{
    Algorithm, Encoding, Location, SignatureFormat, SignatureSource, TimestampFormat,
    TimestampSource,
};
use super::keys::VerifyKey;
use super::request::RequestHeaders;
use super::source::SourceVerifier;
use super::template::{sorted_form_params, RenderValues, TemplatePart};

/// A signed request, ready to POST to the webhook URL with `query` appended.
#[derive(Debug, Clone)]
pub struct SignedRequest {
    pub headers: RequestHeaders,
    pub body: Vec<u8>,
    pub event_id: String,
    /// The query string to send (without `?`), e.g. Twilio's `bodySHA256`.
    pub query: String,
}

/// Why a request cannot be signed for a source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SignError(pub String);

/// A JSON body carrying `event_id` and `event_type` where the definition reads them.
pub fn sample_body(verifier: &SourceVerifier, event_id: &str, event_type: &str) -> Vec<u8> {
    let def = verifier.definition();
    let mut doc = json!({"object": "event", "created": chrono::Utc::now().timestamp(), "data": {"test": true}});
    if starts_with_index(&def.event_id) || starts_with_index(&def.event_type) {
        doc = json!([doc]);
    }
    let mut place = |locations: &[Location], value: &str| {
        if let Some(Location::Json(pointer)) = locations.first() {
            set_pointer(&mut doc, pointer, Value::String(value.to_owned()));
        }
    };
    place(&def.event_id, event_id);
    place(&def.event_type, event_type);
    serde_json::to_vec(&doc).expect("a JSON value serialises")
}

fn starts_with_index(locations: &[Location]) -> bool {
    matches!(locations.first(), Some(Location::Json(p)) if p.split('/').nth(1).is_some_and(is_index))
}

fn is_index(token: &str) -> bool {
    token == "*" || (!token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()))
}

/// Sets the value at `pointer`, making objects (or, for index tokens and `*`, one-element
/// arrays) on the way.
fn set_pointer(doc: &mut Value, pointer: &str, value: Value) {
    let mut at = doc;
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        if is_index(&token) {
            let i = token.parse::<usize>().unwrap_or(0);
            if !at.is_array() {
                *at = json!([]);
            }
            let items = at.as_array_mut().expect("made an array above");
            while items.len() <= i {
                items.push(json!({}));
            }
            at = &mut items[i];
        } else {
            if !at.is_object() {
                *at = json!({});
            }
            let map = at.as_object_mut().expect("made an object above");
            at = map.entry(token).or_insert_with(|| json!({}));
        }
    }
    *at = value;
}

fn timestamp_text(format: TimestampFormat, now: i64) -> String {
    match format {
        TimestampFormat::Seconds => now.to_string(),
        TimestampFormat::Milliseconds => (now * 1000).to_string(),
        TimestampFormat::Rfc3339 => chrono::DateTime::from_timestamp(now, 0)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
    }
}

/// Signs `body` with the source's first key (its `signing_key` for public-key schemes) at
/// unix time `now`. Header-borne ids and types are set to `event_id` and `event_type`;
/// body fields the signature reads and the body lacks are set in it.
pub fn sign_request(
    verifier: &SourceVerifier,
    body: Vec<u8>,
    event_id: &str,
    event_type: &str,
    now: i64,
) -> Result<SignedRequest, SignError> {
    let def = verifier.definition();
    let spec = &def.signature;
    let mut headers = RequestHeaders::new();
    headers.push("content-type", "application/json");
    if let Some(Location::Header(h)) = def.event_id.first() {
        headers.push(h, event_id);
    }
    if let Some(Location::Header(h)) = def.event_type.first() {
        headers.push(h, event_type);
    }
    let timestamp = def
        .timestamp
        .as_ref()
        .map(|t| timestamp_text(t.format, now))
        .unwrap_or_else(|| now.to_string());
    // Body fields the signature reads (Mailgun's timestamp and token) are set in the body.
    let mut body_fields: Vec<(String, String)> = Vec::new();
    if let Some(TimestampSource::Locations(locations)) = def.timestamp.as_ref().map(|t| &t.source) {
        match &locations[0] {
            Location::Header(h) => headers.push(h, timestamp.clone()),
            Location::Json(p) => body_fields.push((p.clone(), timestamp.clone())),
            _ => {}
        }
    }
    // A header or field the template signs and nothing above sets carries the event id, a
    // value unique to this request.
    if let Some(t) = &spec.payload {
        for loc in t.locations() {
            match loc {
                Location::Header(h) if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(h)) => {
                    headers.push(h, event_id)
                }
                Location::Json(p) if !body_fields.iter().any(|(q, _)| q == p) => {
                    body_fields.push((p.clone(), event_id.to_owned()))
                }
                _ => {}
            }
        }
    }
    let mut body = body;
    if !body_fields.is_empty() {
        let mut doc: Value = serde_json::from_slice(&body).map_err(|_| {
            SignError("this provider signs body fields: the body must be JSON".into())
        })?;
        for (pointer, value) in &body_fields {
            set_pointer(&mut doc, pointer, Value::String(value.clone()));
        }
        body = serde_json::to_vec(&doc).expect("a JSON value serialises");
    }
    let query = match &spec.body_digest_query {
        Some(q) => format!("{q}={}", hex::encode(Sha256::digest(&body))),
        None => String::new(),
    };

    // The first key decides the algorithm: a secret signs with the definition's symmetric
    // algorithm, a public key with its private half.
    let first = &verifier.keys()[0];
    let algorithm = match first {
        VerifyKey::Secret(_) => spec
            .algorithms()
            .into_iter()
            .find(|a| !a.is_asymmetric())
            .ok_or_else(|| SignError("no symmetric algorithm".into()))?,
        _ => def
            .asymmetric_algorithm()
            .ok_or_else(|| SignError("no public-key algorithm".into()))?,
    };
    let signature = match algorithm {
        Algorithm::Token => first.token().map(<[u8]>::to_vec).unwrap_or_default(),
        _ => {
            let lookup_headers = headers.clone();
            let view_fields = body_fields.clone();
            let lookup = move |l: &Location| -> Option<String> {
                match l {
                    Location::Header(h) => lookup_headers.get_all(h).next().map(str::to_owned),
                    Location::Json(p) => view_fields
                        .iter()
                        .find(|(q, _)| q == p)
                        .map(|(_, v)| v.clone()),
                    _ => None,
                }
            };
            let urls = verifier.signed_urls(&query);
            if spec.uses(&TemplatePart::Url) && urls.is_empty() {
                return Err(SignError(
                    "this provider signs the URL: the source needs public_url".into(),
                ));
            }
            let form = spec.uses(&TemplatePart::FormParams).then(|| {
                if query.is_empty() {
                    sorted_form_params(&body)
                } else {
                    Vec::new()
                }
            });
            let payload = spec
                .payload
                .as_ref()
                .and_then(|t| {
                    t.render(&RenderValues {
                        body: &body,
                        timestamp: Some(&timestamp),
                        id: spec.uses(&TemplatePart::Id).then_some(event_id),
                        url: urls.first().map(String::as_str),
                        method: "POST",
                        form_params: form.as_deref(),
                        lookup: &lookup,
                        hmac_sha256_hex: &|_| None,
                    })
                })
                .ok_or_else(|| SignError("a value the signature covers is missing".into()))?;
            if algorithm.is_asymmetric() {
                verifier
                    .signing_key()
                    .ok_or_else(|| {
                        SignError("signing as this provider needs the source's signing_key (a private test key)".into())
                    })?
                    .sign(&payload)
            } else {
                first.mac(algorithm, &payload).unwrap_or_default()
            }
        }
    };
    let encoded = match spec.encoding {
        Encoding::Hex => hex::encode(signature),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(signature),
        Encoding::Text => String::from_utf8_lossy(&signature).into_owned(),
    };
    let sig = format!("{}{encoded}", spec.prefix);
    let value = match &spec.format {
        SignatureFormat::Raw => sig,
        SignatureFormat::KeyValue {
            pair_separator,
            kv_separator,
            signature_keys,
            timestamp_key,
        } => {
            let sig = format!("{}{kv_separator}{sig}", signature_keys[0]);
            match timestamp_key {
                Some(t) => format!("{t}{kv_separator}{timestamp}{pair_separator}{sig}"),
                None => sig,
            }
        }
        SignatureFormat::List {
            item_separator,
            versions,
            ..
        } => {
            let version = versions
                .iter()
                .find(|(_, a)| *a == algorithm)
                .map(|(v, _)| v.as_str())
                .unwrap_or(versions[0].0.as_str());
            format!("{version}{item_separator}{sig}")
        }
    };
    match &spec.source {
        SignatureSource::Headers { names, .. } => headers.push(&names[0], value),
        SignatureSource::Body(pointer) => {
            let mut doc: Value = serde_json::from_slice(&body).map_err(|_| {
                SignError("this provider signs in the body: the body must be JSON".into())
            })?;
            set_pointer(&mut doc, pointer, Value::String(value));
            body = serde_json::to_vec(&doc).expect("a JSON value serialises");
        }
    }
    Ok(SignedRequest {
        headers,
        body,
        event_id: event_id.to_owned(),
        query,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::{ProviderRegistry, SourceOverrides, Unverified, Verified};

    /// A `{header:Name}` in the signed payload is set and signed.
    #[test]
    fn signs_header_placeholders() {
        let def = crate::verify::parse_definition(
            "acme.toml",
            r#"
name = "acme"
[signature]
headers = ["X-Acme-Signature"]
format = "raw"
algorithm = "hmac-sha256"
encoding = "hex"
signed_payload = "{header:X-Acme-Request-Id}:{body}"
[event]
id = ["json:/id"]
"#,
        )
        .unwrap();
        let verifier = SourceVerifier::new(def, &["acme-secret"]).unwrap();
        let body = sample_body(&verifier, "evt_acme_1", "test.event");
        let signed =
            sign_request(&verifier, body, "evt_acme_1", "test.event", 1_700_000_000).unwrap();
        assert!(signed
            .headers
            .iter()
            .any(|(n, v)| n.eq_ignore_ascii_case("x-acme-request-id") && v == "evt_acme_1"));
        let verified = Unverified::new(signed.headers, signed.body.into())
            .verify(&verifier, 1_700_000_000)
            .unwrap();
        assert!(matches!(verified, Verified::Event(_)));
    }

    /// A source for `def` as a user would configure one: a secret, or for public-key
    /// providers a public key with its private half as the signing key, and a public URL.
    fn test_source(
        def: crate::verify::ProviderDefinition,
        public_key_first: bool,
    ) -> SourceVerifier {
        let needs_url = def.needs_public_url();
        let pair = crate::verify::test_key_pair(&def, &[7u8; 32]);
        let verifier = match pair {
            Some((public, private)) if public_key_first || !def.takes_secrets() => {
                SourceVerifier::new(def, &[&public])
                    .unwrap()
                    .with_signing_key(&private)
                    .unwrap()
            }
            _ => {
                let secret = if def.secret.strip_prefix == "whsec_" {
                    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
                } else {
                    "test-secret"
                };
                SourceVerifier::new(def, &[secret]).unwrap()
            }
        };
        if needs_url {
            verifier
                .with_public_url("https://hooks.example.com/webhooks/src")
                .unwrap()
        } else {
            verifier
        }
    }

    /// Whatever `send` signs, `verify` accepts, for every built-in provider (and, where a
    /// provider takes both, with a secret and with a public key first).
    #[test]
    fn every_provider_verifies_what_it_signs() {
        let registry = ProviderRegistry::builtin().unwrap();
        let mut checked = 0;
        for name in registry.names() {
            let def = registry.get(name).unwrap();
            let def = def.with_overrides(&SourceOverrides::default()).unwrap();
            for public_key_first in [false, true] {
                if public_key_first && def.asymmetric_algorithm().is_none() {
                    continue;
                }
                let verifier = test_source(def.clone(), public_key_first);
                let body = sample_body(&verifier, "evt_sent_1", "test.event");
                let signed =
                    sign_request(&verifier, body, "evt_sent_1", "test.event", 1_700_000_000)
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                let verified = Unverified::new(signed.headers, signed.body.into())
                    .with_target("POST", &signed.query)
                    .verify(&verifier, 1_700_000_000)
                    .unwrap_or_else(|e| {
                        panic!("{name} (public key first: {public_key_first}): {e}")
                    });
                let Verified::Event(event) = verified else {
                    panic!("{name}: not an event")
                };
                let id = event.provider_event_id().as_str();
                if matches!(
                    def.event_id.first(),
                    Some(Location::Digest(_) | Location::Random)
                ) {
                    assert!(
                        id.starts_with("sha256:") || id.starts_with("random:"),
                        "{name}: {id}"
                    );
                } else {
                    assert_eq!(id, "evt_sent_1", "{name}");
                }
                // The sample carries the type where a header or JSON field holds it (Twilio's
                // form fields are not in a JSON sample).
                if matches!(
                    def.event_type.first(),
                    Some(Location::Header(_) | Location::Json(_))
                ) {
                    assert_eq!(event.event_type(), Some("test.event"), "{name}");
                }
                checked += 1;
            }
        }
        assert!(checked >= 33, "only {checked} providers signed");
    }

    /// A public-key provider cannot be signed for without the source's signing key.
    #[test]
    fn asymmetric_sending_needs_a_signing_key() {
        let registry = ProviderRegistry::builtin().unwrap();
        let def = registry.get("discord").unwrap().as_ref().clone();
        let (public, _) = crate::verify::test_key_pair(&def, &[7u8; 32]).unwrap();
        // The public key alone verifies; signing needs the private half.
        let verifier = SourceVerifier::new(def, &[&public]).unwrap();
        let body = sample_body(&verifier, "1", "test.event");
        let err = sign_request(&verifier, body, "1", "t", 1_700_000_000).unwrap_err();
        assert!(err.0.contains("signing_key"), "{err}");
    }
}
