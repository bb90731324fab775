//! Turning an `Unverified` request into a `Verified` one for one source.

use secrecy::ExposeSecret;
use sha2::{Digest as _, Sha256};

use super::definition::{Algorithm, Location, TimestampFormat, TimestampSource};
use super::ed25519_batch::Ed25519Batch;
use super::handshake::HandshakeSpec;
use super::keys::bytes_equal;
use super::request::{HeaderLookup, Unverified, Verified, VerifiedEvent};
use super::signed::{candidates, Signed};
use super::source::SourceVerifier;
use super::template::{sorted_form_params, RenderValues, TemplatePart};
use super::view::{single_header, RequestView};
use crate::domain::ProviderEventId;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("no signature ({0}) in the request")]
    MissingSignature(String),
    #[error("the signature does not match any configured secret")]
    InvalidSignature,
    #[error("the signature is malformed: {0}")]
    MalformedSignature(&'static str),
    #[error("the signed timestamp is outside the {0} s tolerance")]
    TimestampOutOfTolerance(i64),
    #[error("the request carries no event id ({0})")]
    MissingEventId(String),
    /// An id is there but cannot serve as the dedupe key: a control character (a NUL
    /// included, which PostgreSQL cannot store as text) or over 255 bytes.
    #[error("the event id cannot be used: {0}")]
    InvalidEventId(String),
    #[error("the body is not valid JSON, and a value is read from it")]
    MalformedBody,
    #[error("this request is not a handshake the provider sends")]
    UnknownHandshake,
    #[error("the handshake's verify token does not match the source's")]
    InvalidVerifyToken,
    #[error("the handshake cannot be answered: {0}")]
    InvalidHandshake(&'static str),
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
            Self::UnknownHandshake => "unknown_handshake",
            Self::InvalidVerifyToken => "invalid_verify_token",
            Self::InvalidHandshake(_) => "invalid_handshake",
        }
    }
}

/// A request verification refused, handed back whole so that it can be kept (the quarantine).
#[derive(Debug)]
pub struct Rejected {
    pub error: VerifyError,
    pub request: Unverified,
}

/// What `prepare` leaves: an answer already, or a signature to check.
enum Step<'a> {
    Done(Checked),
    Signed(Signed<'a>),
}

/// What `check` found: a handshake's answer, or an authentic event's dedupe key and facts.
enum Checked {
    Answer(Verified),
    Event {
        provider_event_id: ProviderEventId,
        event_type: Option<String>,
        secret_index: usize,
    },
}

impl Unverified {
    /// Answers a handshake, or checks the signature, then the timestamp, then reads the id.
    /// `now` is unix seconds, passed in so tests can pin the clock.
    pub fn verify(self, verifier: &SourceVerifier, now: i64) -> Result<Verified, VerifyError> {
        self.verify_or_return(verifier, now).map_err(|r| r.error)
    }

    /// As `verify`, but a refused request comes back with the error instead of being dropped
    /// (boxed: the refusal is the rare path, and keeps the result small).
    pub fn verify_or_return(
        self,
        verifier: &SourceVerifier,
        now: i64,
    ) -> Result<Verified, Box<Rejected>> {
        let checked = self.check(verifier, now);
        self.conclude(verifier, checked)
    }

    /// As `verify_or_return`, but a lone Ed25519 signature is checked in a batch with those
    /// of concurrent requests (`Ed25519Batch`): the ingest path's way in.
    pub async fn verify_batched_or_return(
        self,
        verifier: &SourceVerifier,
        now: i64,
        batch: &Ed25519Batch,
    ) -> Result<Verified, Box<Rejected>> {
        let checked = self.check_batched(verifier, now, batch).await;
        self.conclude(verifier, checked)
    }

    fn conclude(
        self,
        verifier: &SourceVerifier,
        checked: Result<Checked, VerifyError>,
    ) -> Result<Verified, Box<Rejected>> {
        match checked {
            Ok(Checked::Answer(answer)) => Ok(answer),
            Ok(Checked::Event {
                provider_event_id,
                event_type,
                secret_index,
            }) => Ok(Verified::Event(VerifiedEvent {
                headers: self.headers,
                body: self.body,
                provider_event_id,
                event_type,
                scheme: verifier.definition.name.clone(),
                secret_index,
            })),
            Err(error) => Err(Box::new(Rejected {
                error,
                request: self,
            })),
        }
    }

    fn check(&self, verifier: &SourceVerifier, now: i64) -> Result<Checked, VerifyError> {
        match self.prepare(verifier)? {
            Step::Done(checked) => Ok(checked),
            Step::Signed(signed) => {
                let key_index = signed.key_index(verifier)?;
                self.finish(verifier, now, signed, key_index)
            }
        }
    }

    /// As `check`, but a request whose one possible signature is Ed25519 waits for `batch`
    /// to check it together with others.
    async fn check_batched(
        &self,
        verifier: &SourceVerifier,
        now: i64,
        batch: &Ed25519Batch,
    ) -> Result<Checked, VerifyError> {
        let mut signed = match self.prepare(verifier)? {
            Step::Done(checked) => return Ok(checked),
            Step::Signed(signed) => signed,
        };
        let key_index = match signed.one_ed25519(verifier) {
            Some(one) => {
                if !batch.check(one.key, one.message, one.signature).await {
                    return Err(VerifyError::InvalidSignature);
                }
                one.key_index
            }
            None => signed.key_index(verifier)?,
        };
        self.finish(verifier, now, signed, key_index)
    }

    /// Answers a handshake the provider does not sign, or reads what a signature covers.
    fn prepare<'a>(&'a self, verifier: &'a SourceVerifier) -> Result<Step<'a>, VerifyError> {
        let def = &verifier.definition;
        let view = RequestView::new(self, &def.body_pointers);
        // Handshakes the provider does not sign (GET challenges, Graph's validationToken).
        for h in def.handshakes.iter().filter(|h| !h.signed) {
            if h.matches(view.method, &|l| view.lookup(l)) {
                return answer(h, &view, verifier, None).map(|a| Step::Done(Checked::Answer(a)));
            }
        }
        if view.method != "POST" {
            return Err(VerifyError::UnknownHandshake);
        }
        let spec = &def.signature;
        let (parsed, every_must_match) = candidates(&view, def)?;

        let timestamp = match &def.timestamp {
            None => None,
            Some(ts) => Some(match &ts.source {
                TimestampSource::Signature => parsed
                    .timestamp
                    .clone()
                    .ok_or(VerifyError::MalformedSignature("no timestamp field"))?,
                TimestampSource::Locations(locations) => signed_value(&view, locations)?
                    .ok_or_else(|| VerifyError::MissingSignature(describe(locations)))?,
            }),
        };
        // When the id is signed, the id stored as the dedupe key must be that very value:
        // read it once, refusing a repeated header, and use it for both.
        let signed_id = if spec.uses(&TemplatePart::Id) {
            match header_id(&def.event_id, self)? {
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
        let form_params = if spec.uses(&TemplatePart::FormParams) {
            match spec
                .body_digest_query
                .as_deref()
                .and_then(|q| view.query(q))
            {
                // The URL is signed and carries the body's digest: the body is covered by it.
                Some(sent) => {
                    let actual = hex::encode(Sha256::digest(view.body));
                    if !bytes_equal(actual.as_bytes(), sent.to_ascii_lowercase().as_bytes()) {
                        return Err(VerifyError::InvalidSignature);
                    }
                    Some(Vec::new())
                }
                None => Some(sorted_form_params(view.body)),
            }
        } else {
            None
        };
        let payloads = match &spec.payload {
            None => vec![Vec::new()],
            Some(template) => {
                let urls = verifier.signed_urls(view.raw_query);
                let urls: Vec<Option<&str>> = if urls.is_empty() {
                    vec![None]
                } else {
                    urls.iter().map(|u| Some(u.as_str())).collect()
                };
                let lookup = |l: &Location| view.lookup(l);
                let mut payloads = Vec::with_capacity(urls.len());
                for url in urls {
                    let payload = template
                        .render(&RenderValues {
                            body: view.body,
                            timestamp: timestamp.as_deref(),
                            id: signed_id,
                            url,
                            method: view.method,
                            form_params: form_params.as_deref(),
                            lookup: &lookup,
                            hmac_sha256_hex: &|_| None,
                        })
                        .ok_or(VerifyError::MalformedSignature("a signed value is missing"))?;
                    payloads.push(payload);
                }
                payloads
            }
        };
        Ok(Step::Signed(Signed {
            view,
            parsed,
            every_must_match,
            timestamp,
            signed_id,
            payloads,
        }))
    }

    /// Checks the timestamp of a request `key_index` signed, then answers its handshake or
    /// reads its id.
    fn finish(
        &self,
        verifier: &SourceVerifier,
        now: i64,
        signed: Signed<'_>,
        secret_index: usize,
    ) -> Result<Checked, VerifyError> {
        let def = &verifier.definition;
        let Signed {
            view,
            timestamp,
            signed_id,
            ..
        } = signed;
        if let (Some(ts_spec), Some(ts)) = (&def.timestamp, &timestamp) {
            let seconds = timestamp_seconds(ts_spec.format, ts).ok_or(
                VerifyError::MalformedSignature("the timestamp cannot be read"),
            )?;
            if now.abs_diff(seconds) > ts_spec.tolerance_seconds.unsigned_abs() {
                return Err(VerifyError::TimestampOutOfTolerance(
                    ts_spec.tolerance_seconds,
                ));
            }
        }

        // Authentic from here on.
        for h in def.handshakes.iter().filter(|h| h.signed) {
            if h.matches(view.method, &|l| view.lookup(l)) {
                return answer(h, &view, verifier, Some(secret_index)).map(Checked::Answer);
            }
        }
        let raw_id = match signed_id {
            Some(id) => id.to_owned(),
            None => match first_value(&view, &def.event_id) {
                Ok(Some(id)) => id,
                Ok(None) => return Err(VerifyError::MissingEventId(describe(&def.event_id))),
                Err(e) => return Err(e),
            },
        };
        let provider_event_id = ProviderEventId::parse(&raw_id).map_err(|e| {
            if raw_id.trim().is_empty() {
                VerifyError::MissingEventId(e.to_string())
            } else {
                VerifyError::InvalidEventId(e.to_string())
            }
        })?;
        let event_type = first_value(&view, &def.event_type).ok().flatten();
        Ok(Checked::Event {
            provider_event_id,
            event_type,
            secret_index,
        })
    }
}

fn answer(
    handshake: &HandshakeSpec,
    view: &RequestView<'_>,
    verifier: &SourceVerifier,
    key_index: Option<usize>,
) -> Result<Verified, VerifyError> {
    if let Some(location) = &handshake.verify_token {
        let sent = view.lookup(location);
        let ok = match (&sent, &verifier.verify_token) {
            (Some(sent), Some(token)) => bytes_equal(token.expose_secret(), sent.as_bytes()),
            _ => false,
        };
        if !ok {
            return Err(VerifyError::InvalidVerifyToken);
        }
    }
    let hmac = |m: &[u8]| {
        key_index
            .and_then(|i| verifier.keys[i].mac(Algorithm::HmacSha256, m))
            .map(hex::encode)
    };
    let lookup = |l: &Location| view.lookup(l);
    handshake
        .answer(&RenderValues {
            body: view.body,
            timestamp: None,
            id: None,
            url: None,
            method: view.method,
            form_params: None,
            lookup: &lookup,
            hmac_sha256_hex: &hmac,
        })
        .map(Verified::Challenge)
        .ok_or(VerifyError::InvalidHandshake(
            "a value it echoes is missing or too long",
        ))
}

/// The first non-blank value among `locations`. A header is read only when sent once; a
/// body that is not JSON is an error only if no location yields a value.
fn first_value(
    view: &RequestView<'_>,
    locations: &[Location],
) -> Result<Option<String>, VerifyError> {
    let mut malformed = false;
    for loc in locations {
        match view.value(loc) {
            Ok(Some(v)) if !v.trim().is_empty() => return Ok(Some(v)),
            Ok(_) => {}
            Err(_) => malformed = true,
        }
    }
    if malformed {
        Err(VerifyError::MalformedBody)
    } else {
        Ok(None)
    }
}

/// A signed value (the timestamp): the first location present, a header only when sent
/// once, since two values make what was signed ambiguous.
fn signed_value(
    view: &RequestView<'_>,
    locations: &[Location],
) -> Result<Option<String>, VerifyError> {
    for loc in locations {
        let value = match loc {
            Location::Header(h) => match view.headers.get_one(h) {
                HeaderLookup::Absent => None,
                HeaderLookup::One(v) => Some(v.to_owned()),
                HeaderLookup::Repeated => {
                    return Err(VerifyError::MalformedSignature(
                        "a signed header is repeated",
                    ))
                }
            },
            other => view.value(other).map_err(|_| VerifyError::MalformedBody)?,
        };
        if value.is_some() {
            return Ok(value);
        }
    }
    Ok(None)
}

/// The signed id: from headers only, sent once.
fn header_id<'a>(
    locations: &[Location],
    request: &'a Unverified,
) -> Result<Option<&'a str>, VerifyError> {
    let names: Vec<String> = locations
        .iter()
        .filter_map(|l| match l {
            Location::Header(h) => Some(h.clone()),
            _ => None,
        })
        .collect();
    match single_header(&request.headers, &names) {
        Ok(v) => Ok(v.filter(|v| !v.trim().is_empty())),
        Err(()) => Err(VerifyError::MalformedSignature(
            "the event id header is repeated",
        )),
    }
}

/// Unix seconds from a timestamp as sent. Only plain digits for numbers: "+5", " 5" or "5.0"
/// are not what any provider sends.
fn timestamp_seconds(format: TimestampFormat, s: &str) -> Option<i64> {
    if s.is_empty() || s.len() > 64 {
        return None;
    }
    // Digits beyond i64 are a time too far away, not a malformed one.
    let digits = || {
        s.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| s.parse::<i64>().unwrap_or(i64::MAX))
    };
    match format {
        TimestampFormat::Seconds => digits(),
        TimestampFormat::Milliseconds => digits().map(|ms| ms / 1000),
        TimestampFormat::Rfc3339 => chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.timestamp()),
    }
}

fn describe(locations: &[Location]) -> String {
    locations
        .iter()
        .map(Location::describe)
        .collect::<Vec<_>>()
        .join(" or ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::{ProviderRegistry, RequestHeaders};

    /// 32 signatures (the most one request may carry) cost one HMAC of the body per secret,
    /// not one per signature and secret.
    #[test]
    fn many_signatures_cost_one_mac_per_secret() {
        let registry = ProviderRegistry::builtin().unwrap();
        let def = registry.get("stripe").unwrap().as_ref().clone();
        let verifier = SourceVerifier::new(def, &["whsec_one", "whsec_two"]).unwrap();
        let sigs: Vec<String> = (0..32).map(|i| format!("v1={i:064x}")).collect();
        let mut headers = RequestHeaders::new();
        headers.push(
            "stripe-signature",
            format!("t=1700000000,{}", sigs.join(",")),
        );
        let before = super::super::keys::MACS_COMPUTED.with(|n| n.get());
        let result = Unverified::new(headers, bytes::Bytes::from_static(b"{}"))
            .verify(&verifier, 1_700_000_000);
        let computed = super::super::keys::MACS_COMPUTED.with(|n| n.get()) - before;
        assert_eq!(result.unwrap_err(), VerifyError::InvalidSignature);
        assert_eq!(computed, 2);
    }
}
