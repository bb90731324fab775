//! Signing a request exactly as a source's provider would: the inverse of `verify`, for
//! `hookgate send` (a "send test event" button) and for tests.

use base64::Engine as _;
use serde_json::{json, Value};

use super::definition::{Encoding, Location, SignatureFormat, TimestampSource};
use super::request::RequestHeaders;
use super::template::{PayloadValues, Segment};
use super::verifier::SourceVerifier;

/// A signed request, ready to POST.
#[derive(Debug, Clone)]
pub struct SignedRequest {
    pub headers: RequestHeaders,
    pub body: Vec<u8>,
    pub event_id: String,
}

/// A JSON body carrying `event_id` and `event_type` where the definition reads them.
pub fn sample_body(verifier: &SourceVerifier, event_id: &str, event_type: &str) -> Vec<u8> {
    let def = verifier.definition();
    let mut doc = json!({"object": "event", "created": chrono::Utc::now().timestamp(), "data": {"test": true}});
    let mut place = |locations: &[Location], value: &str| {
        if let Some(Location::Json(pointer)) = locations.first() {
            set_pointer(&mut doc, pointer, value);
        }
    };
    place(&def.event_id, event_id);
    place(&def.event_type, event_type);
    serde_json::to_vec(&doc).expect("a JSON value serialises")
}

fn set_pointer(doc: &mut Value, pointer: &str, value: &str) {
    let mut at = doc;
    let parts: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    for (i, part) in parts.iter().enumerate() {
        if !at.is_object() {
            *at = json!({});
        }
        let map = at.as_object_mut().expect("made an object above");
        if i + 1 == parts.len() {
            map.insert(part.clone(), Value::String(value.to_owned()));
            return;
        }
        at = map.entry(part.clone()).or_insert_with(|| json!({}));
    }
}

/// Signs `body` with the source's first secret at unix time `now`. Header-borne ids and
/// types are set to `event_id` and `event_type`.
pub fn sign_request(
    verifier: &SourceVerifier,
    body: Vec<u8>,
    event_id: &str,
    event_type: &str,
    now: i64,
) -> SignedRequest {
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
    let timestamp = now.to_string();
    if let Some(TimestampSource::Headers(names)) = def.timestamp.as_ref().map(|t| &t.source) {
        headers.push(&names[0], timestamp.clone());
    }
    // A header the template signs and nothing above sets carries the event id, a value
    // unique to this request.
    for name in spec.payload.headers() {
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            headers.push(name, event_id);
        }
    }
    let lookup = headers.clone();
    let header = |name: &str| -> Option<&str> {
        lookup
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    };
    let payload = spec
        .payload
        .render(&PayloadValues {
            body: &body,
            timestamp: Some(&timestamp),
            id: spec.payload.uses(Segment::Id).then_some(event_id),
            header: &header,
        })
        .expect("every value the template reads is set above");
    let mac = verifier.first_key().mac(spec.algorithm, &payload);
    let encoded = match spec.encoding {
        Encoding::Hex => hex::encode(mac),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(mac),
    };
    let value = match &spec.format {
        SignatureFormat::Raw { prefix } => format!("{prefix}{encoded}"),
        SignatureFormat::KeyValue {
            pair_separator,
            kv_separator,
            signature_keys,
            timestamp_key,
        } => {
            let sig = format!("{}{kv_separator}{encoded}", signature_keys[0]);
            match timestamp_key {
                Some(t) => format!("{t}{kv_separator}{timestamp}{pair_separator}{sig}"),
                None => sig,
            }
        }
        SignatureFormat::List {
            item_separator,
            versions,
            ..
        } => format!("{}{item_separator}{encoded}", versions[0]),
    };
    headers.push(&spec.headers[0], value);
    SignedRequest {
        headers,
        body,
        event_id: event_id.to_owned(),
    }
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
        let signed = sign_request(&verifier, body, "evt_acme_1", "test.event", 1_700_000_000);
        assert!(signed
            .headers
            .iter()
            .any(|(n, v)| n.eq_ignore_ascii_case("x-acme-request-id") && v == "evt_acme_1"));
        let verified = Unverified::new(signed.headers, signed.body.into())
            .verify(&verifier, 1_700_000_000)
            .unwrap();
        assert!(matches!(verified, Verified::Event(_)));
    }

    /// Whatever `send` signs, `verify` accepts, for every built-in provider.
    #[test]
    fn every_provider_verifies_what_it_signs() {
        let registry = ProviderRegistry::builtin().unwrap();
        for name in registry.names() {
            let def = registry.get(name).unwrap();
            let def = def.with_overrides(&SourceOverrides::default()).unwrap();
            let secret = if def.secret.strip_prefix == "whsec_" {
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
            } else {
                "test-secret"
            };
            let verifier = SourceVerifier::new(def, &[secret]).unwrap();
            let body = sample_body(&verifier, "evt_sent_1", "test.event");
            let signed = sign_request(&verifier, body, "evt_sent_1", "test.event", 1_700_000_000);
            let verified = Unverified::new(signed.headers, signed.body.into())
                .verify(&verifier, 1_700_000_000)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let Verified::Event(event) = verified else {
                panic!("{name}: not an event")
            };
            assert_eq!(event.provider_event_id().as_str(), "evt_sent_1", "{name}");
            assert_eq!(event.event_type(), Some("test.event"), "{name}");
        }
    }
}
