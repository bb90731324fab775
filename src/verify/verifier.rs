//! Turning an `Unverified` request into a `Verified` one for one source.

use std::cell::OnceCell;

use serde_json::Value;

use super::definition::{ChallengeKind, Location, ProviderDefinition, TimestampSource};
use super::json_pointer::pointer_values;
use super::request::{HeaderLookup, RequestHeaders, Unverified, Verified, VerifiedEvent};
use super::signature::{macs_equal, parse_signature_header, SecretKey};
use super::template::{PayloadValues, Segment};
use crate::domain::ProviderEventId;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("no signature header ({0}) in the request")]
    MissingSignature(String),
    #[error("the signature does not match any configured secret")]
    InvalidSignature,
    #[error("the signature header is malformed: {0}")]
    MalformedSignature(&'static str),
    #[error("the signed timestamp is outside the {0} s tolerance")]
    TimestampOutOfTolerance(i64),
    #[error("the request carries no event id ({0})")]
    MissingEventId(String),
    /// An id is there but cannot serve as the dedupe key: a control character (a NUL
    /// included, which PostgreSQL cannot store as text) or over 255 bytes.
    #[error("the event id cannot be used: {0}")]
    InvalidEventId(String),
    #[error("the body is not valid JSON, and the event id is read from it")]
    MalformedBody,
}

impl VerifyError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::MissingSignature(_) => "missing_signature",
            Self::InvalidSignature | Self::MalformedSignature(_) => "invalid_signature",
            Self::TimestampOutOfTolerance(_) => "timestamp_out_of_tolerance",
            Self::MissingEventId(_) => "missing_event_id",
            Self::InvalidEventId(_) => "invalid_event_id",
            Self::MalformedBody => "malformed_body",
        }
    }
}

/// A provider definition with a source's overrides applied, and that source's keys.
#[derive(Debug)]
pub struct SourceVerifier {
    definition: ProviderDefinition,
    keys: Vec<SecretKey>,
}

impl SourceVerifier {
    /// `secrets` in order of preference; the error gives the index of a secret that is unusable.
    pub fn new(
        definition: ProviderDefinition,
        secrets: &[&str],
    ) -> Result<Self, (usize, &'static str)> {
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(i, s)| SecretKey::derive(&definition.secret, s).map_err(|e| (i, e)))
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err((0, "list is empty"));
        }
        Ok(Self { definition, keys })
    }

    pub fn provider_name(&self) -> &str {
        &self.definition.name
    }

    pub(super) fn definition(&self) -> &ProviderDefinition {
        &self.definition
    }

    /// The preferred (first listed) secret's key: what a sender signs with.
    pub(super) fn first_key(&self) -> &SecretKey {
        &self.keys[0]
    }
}

impl Unverified {
    /// Checks the signature against every secret, then the timestamp, then reads the id.
    /// `now` is unix seconds, passed in so tests can pin the clock.
    pub fn verify(self, verifier: &SourceVerifier, now: i64) -> Result<Verified, VerifyError> {
        let def = &verifier.definition;
        let spec = &def.signature;
        let sig_value = first_present(&self.headers, &spec.headers)?
            .ok_or_else(|| VerifyError::MissingSignature(spec.headers.join(" or ")))?;
        if sig_value.trim().is_empty() {
            return Err(VerifyError::MissingSignature(spec.headers.join(" or ")));
        }
        let parsed = parse_signature_header(&spec.format, spec.encoding, sig_value)
            .ok_or(VerifyError::MalformedSignature("no decodable signature"))?;

        let timestamp = match &def.timestamp {
            None => None,
            Some(ts) => Some(match &ts.source {
                TimestampSource::Signature => parsed
                    .timestamp
                    .clone()
                    .ok_or(VerifyError::MalformedSignature("no timestamp field"))?,
                TimestampSource::Headers(names) => first_present(&self.headers, names)?
                    .ok_or_else(|| VerifyError::MissingSignature(names.join(" or ")))?
                    .to_owned(),
            }),
        };
        // When the id is signed, the id stored as the dedupe key must be that very value:
        // read it once, refusing a repeated header, and use it for both.
        let signed_id = if spec.payload.uses(Segment::Id) {
            match header_lookup(&def.event_id, &self.headers)? {
                Some(id) => Some(id),
                // Unauthenticated so far: say only that the signature cannot be checked.
                None => {
                    return Err(VerifyError::MalformedSignature(
                        "the signed id header is missing",
                    ))
                }
            }
        } else {
            None
        };
        let headers = &self.headers;
        let header = move |name: &str| -> Option<&str> {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        };
        let payload = spec
            .payload
            .render(&PayloadValues {
                body: &self.body,
                timestamp: timestamp.as_deref(),
                id: signed_id,
                header: &header,
            })
            .ok_or(VerifyError::MalformedSignature(
                "a signed header is missing",
            ))?;

        let mut matched = None;
        for (index, key) in verifier.keys.iter().enumerate() {
            let expected = key.mac(spec.algorithm, &payload);
            if parsed.candidates.iter().any(|c| macs_equal(&expected, c)) {
                matched = Some(index);
                break;
            }
        }
        let secret_index = matched.ok_or(VerifyError::InvalidSignature)?;

        if let (Some(ts_spec), Some(ts)) = (&def.timestamp, &timestamp) {
            // Only plain decimal seconds: "+5", " 5" or "5.0" are not what any provider sends.
            if ts.is_empty() || !ts.bytes().all(|b| b.is_ascii_digit()) {
                return Err(VerifyError::MalformedSignature("timestamp is not a number"));
            }
            let ts: i64 = ts
                .parse()
                .map_err(|_| VerifyError::TimestampOutOfTolerance(ts_spec.tolerance_seconds))?;
            if (now - ts).abs() > ts_spec.tolerance_seconds {
                return Err(VerifyError::TimestampOutOfTolerance(
                    ts_spec.tolerance_seconds,
                ));
            }
        }

        // Authentic from here on: parsing the body is now safe.
        let challenge_pointers: &[&str] = match def.challenge {
            Some(ChallengeKind::SlackUrlVerification) => &[SLACK_TYPE, SLACK_CHALLENGE],
            None => &[],
        };
        let fields = BodyFields::new(
            &self.body,
            [&def.event_id, &def.event_type],
            challenge_pointers,
        );
        if def.challenge == Some(ChallengeKind::SlackUrlVerification) {
            let field = |pointer| fields.get(pointer).ok().flatten().and_then(Value::as_str);
            if field(SLACK_TYPE) == Some("url_verification") {
                let challenge = field(SLACK_CHALLENGE).unwrap_or_default();
                return Ok(Verified::Challenge(challenge.to_owned()));
            }
        }
        let raw_id = match signed_id {
            Some(id) => id.to_owned(),
            None => match lookup(&def.event_id, &self.headers, &fields) {
                Lookup::Found(id) => id,
                Lookup::MalformedJson => return Err(VerifyError::MalformedBody),
                Lookup::NotFound => {
                    return Err(VerifyError::MissingEventId(describe(&def.event_id)))
                }
            },
        };
        let provider_event_id = ProviderEventId::parse(&raw_id).map_err(|e| {
            if raw_id.trim().is_empty() {
                VerifyError::MissingEventId(e.to_string())
            } else {
                VerifyError::InvalidEventId(e.to_string())
            }
        })?;
        let event_type = match lookup(&def.event_type, &self.headers, &fields) {
            Lookup::Found(t) => Some(t),
            _ => None,
        };
        Ok(Verified::Event(VerifiedEvent {
            headers: self.headers,
            body: self.body,
            provider_event_id,
            event_type,
            scheme: def.name.clone(),
            secret_index,
        }))
    }
}

/// The first of `names` present; a header sent twice is refused rather than guessed at.
fn first_present<'a>(
    headers: &'a RequestHeaders,
    names: &[String],
) -> Result<Option<&'a str>, VerifyError> {
    for name in names {
        match headers.get_one(name) {
            HeaderLookup::Absent => continue,
            HeaderLookup::One(v) => return Ok(Some(v)),
            HeaderLookup::Repeated => {
                return Err(VerifyError::MalformedSignature(
                    "a signature header is repeated",
                ))
            }
        }
    }
    Ok(None)
}

/// The first non-blank value among header locations; a repeated header is refused.
fn header_lookup<'a>(
    locations: &[Location],
    headers: &'a RequestHeaders,
) -> Result<Option<&'a str>, VerifyError> {
    for loc in locations {
        if let Location::Header(h) = loc {
            match headers.get_one(h) {
                HeaderLookup::One(v) if !v.trim().is_empty() => return Ok(Some(v)),
                HeaderLookup::Repeated => {
                    return Err(VerifyError::MalformedSignature(
                        "the event id header is repeated",
                    ))
                }
                _ => {}
            }
        }
    }
    Ok(None)
}

enum Lookup {
    Found(String),
    NotFound,
    MalformedJson,
}

/// Where Slack's `url_verification` handshake carries its type and challenge.
const SLACK_TYPE: &str = "/type";
const SLACK_CHALLENGE: &str = "/challenge";

/// The body fields a definition reads (event id, type, a challenge's fields), all found in
/// one pass over the body the first time one is asked for: a request whose values all come
/// from headers never parses its body here.
struct BodyFields<'a> {
    body: &'a [u8],
    pointers: Vec<&'a str>,
    values: OnceCell<Result<Vec<Option<Value>>, serde_json::Error>>,
}

impl<'a> BodyFields<'a> {
    fn new<const N: usize>(
        body: &'a [u8],
        location_lists: [&'a [Location]; N],
        more_pointers: &[&'a str],
    ) -> Self {
        let pointers = location_lists
            .into_iter()
            .flatten()
            .filter_map(|loc| match loc {
                Location::Json(pointer) => Some(pointer.as_str()),
                Location::Header(_) => None,
            })
            .chain(more_pointers.iter().copied())
            .collect();
        Self {
            body,
            pointers,
            values: OnceCell::new(),
        }
    }

    /// `Err` when the body is not a JSON document.
    fn get(&self, pointer: &str) -> Result<Option<&Value>, ()> {
        let values = self
            .values
            .get_or_init(|| pointer_values(self.body, &self.pointers))
            .as_ref()
            .map_err(|_| ())?;
        let at = self.pointers.iter().position(|p| *p == pointer);
        Ok(at.and_then(|i| values[i].as_ref()))
    }
}

/// The first value found among `locations`. The body is parsed only for a JSON location
/// (a body that is not JSON is an error only if no location yields a value).
fn lookup(locations: &[Location], headers: &RequestHeaders, body: &BodyFields) -> Lookup {
    let mut malformed = false;
    for loc in locations {
        match loc {
            Location::Header(h) => {
                if let Some(v) = headers.get_all(h).next().filter(|v| !v.trim().is_empty()) {
                    return Lookup::Found(v.to_owned());
                }
            }
            Location::Json(pointer) => match body.get(pointer) {
                Err(()) => malformed = true,
                Ok(Some(Value::String(s))) if !s.is_empty() => return Lookup::Found(s.clone()),
                // Only integers that fit 64 bits have an exact text: a larger number
                // would be rounded, and two distinct ids would collide.
                Ok(Some(Value::Number(n))) if n.is_i64() || n.is_u64() => {
                    return Lookup::Found(n.to_string())
                }
                Ok(_) => {}
            },
        }
    }
    if malformed {
        Lookup::MalformedJson
    } else {
        Lookup::NotFound
    }
}

fn describe(locations: &[Location]) -> String {
    locations
        .iter()
        .map(|l| match l {
            Location::Header(h) => format!("header {h}"),
            Location::Json(p) => format!("body field {p}"),
        })
        .collect::<Vec<_>>()
        .join(" or ")
}
