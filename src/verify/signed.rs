//! A request's signatures once read, and the payloads they cover: which configured key made
//! them, checked at once or, for a lone Ed25519 signature, handed to a batch.

use super::definition::{Algorithm, Location, ProviderDefinition, SignatureSource};
use super::keys::{bytes_equal, VerifyKey};
use super::request::HeaderLookup;
use super::signature::{parse_signature_value, Candidate, ParseError, ParsedSignature};
use super::source::SourceVerifier;
use super::verifier::VerifyError;
use super::view::RequestView;

/// A POST whose signature values are read and whose signed payloads are built: left to do is
/// to find the key that signed it, then to check its timestamp and read its id.
pub(super) struct Signed<'a> {
    pub view: RequestView<'a>,
    pub parsed: ParsedSignature,
    /// Every value must verify (a `*` pointer), not just one.
    pub every_must_match: bool,
    pub timestamp: Option<String>,
    pub signed_id: Option<&'a str>,
    pub payloads: Vec<Vec<u8>>,
}

/// The one check that can authenticate a request: an Ed25519 signature and its key.
pub(super) struct OneEd25519<'k> {
    pub key_index: usize,
    pub key: &'k ed25519_dalek::VerifyingKey,
    pub message: Vec<u8>,
    pub signature: ed25519_dalek::Signature,
}

impl Signed<'_> {
    /// The index of the configured key that signed the request, checked here and now.
    pub fn key_index(&self, verifier: &SourceVerifier) -> Result<usize, VerifyError> {
        let (parsed, payloads) = (&self.parsed, &self.payloads);
        if self.every_must_match {
            // Each value must be authentic; the index reported is the first one's key.
            let mut first = None;
            for c in &parsed.candidates {
                let i = verifier
                    .keys
                    .iter()
                    .position(|k| key_matches(k, std::slice::from_ref(c), payloads));
                first.get_or_insert(i.ok_or(VerifyError::InvalidSignature)?);
            }
            first.ok_or(VerifyError::InvalidSignature)
        } else {
            verifier
                .keys
                .iter()
                .position(|k| key_matches(k, &parsed.candidates, payloads))
                .ok_or(VerifyError::InvalidSignature)
        }
    }

    /// The request's only possible check, when it is one Ed25519 signature under one key over
    /// one payload (the usual case: several keys, several signatures or several signed URLs
    /// ask whether any pair verifies, which a batch cannot tell). Takes the payload.
    pub fn one_ed25519<'k>(&mut self, verifier: &'k SourceVerifier) -> Option<OneEd25519<'k>> {
        if self.every_must_match || self.payloads.len() != 1 {
            return None;
        }
        let mut pairs = verifier.keys.iter().enumerate().flat_map(|(i, k)| {
            self.parsed
                .candidates
                .iter()
                .filter(move |c| k.serves(c.algorithm))
                .map(move |c| (i, k, c))
        });
        let (key_index, key, candidate) = pairs.next()?;
        if pairs.next().is_some() {
            return None;
        }
        let (VerifyKey::Ed25519(key), Algorithm::Ed25519) = (key, candidate.algorithm) else {
            return None;
        };
        let signature = ed25519_dalek::Signature::from_slice(&candidate.bytes).ok()?;
        Some(OneEd25519 {
            key_index,
            key,
            message: self.payloads.pop()?,
            signature,
        })
    }
}

/// Whether `key` verifies any of `candidates` over any of `payloads`. An HMAC is computed
/// once per payload and algorithm and compared with every candidate: a request carrying 32
/// signatures costs one MAC of its body per key, not 32.
fn key_matches(key: &VerifyKey, candidates: &[Candidate], payloads: &[Vec<u8>]) -> bool {
    let hmac = |a: Algorithm| !a.is_asymmetric() && a != Algorithm::Token;
    for payload in payloads {
        let mut macs: Vec<(Algorithm, Vec<u8>)> = Vec::new();
        for c in candidates.iter().filter(|c| key.serves(c.algorithm)) {
            let ok = if hmac(c.algorithm) {
                let at = match macs.iter().position(|(a, _)| *a == c.algorithm) {
                    Some(at) => at,
                    None => {
                        let Some(mac) = key.mac(c.algorithm, payload) else {
                            continue;
                        };
                        macs.push((c.algorithm, mac));
                        macs.len() - 1
                    }
                };
                bytes_equal(&macs[at].1, &c.bytes)
            } else {
                key.check(c.algorithm, payload, &c.bytes)
            };
            if ok {
                return true;
            }
        }
    }
    false
}

/// The candidate signatures, and whether every one of them must verify (a `*` pointer).
pub(super) fn candidates(
    view: &RequestView<'_>,
    def: &ProviderDefinition,
) -> Result<(ParsedSignature, bool), VerifyError> {
    let spec = &def.signature;
    let (values, every_must_match, missing) = match &spec.source {
        SignatureSource::Headers { names, every } => {
            let mut values = Vec::new();
            for name in names {
                match view.headers.get_one(name) {
                    HeaderLookup::Absent => continue,
                    HeaderLookup::One(v) => values.push(v.to_owned()),
                    HeaderLookup::Repeated => {
                        return Err(VerifyError::MalformedSignature(
                            "a signature header is repeated",
                        ))
                    }
                }
                if !every {
                    break;
                }
            }
            (values, false, names.join(" or "))
        }
        SignatureSource::Body(pointer) => {
            let every = pointer.contains("/*");
            let values = if every {
                view.expand(pointer)
            } else {
                view.value(&Location::Json(pointer.clone()))
                    .map(|v| vec![v])
            }
            .map_err(|_| VerifyError::MalformedBody)?;
            // With `*`, an element without a signature cannot pass beside signed ones.
            if every && values.len() > 1 && values.iter().any(Option::is_none) {
                return Err(VerifyError::InvalidSignature);
            }
            let values: Vec<String> = values.into_iter().flatten().collect();
            (
                values,
                pointer.contains("/*"),
                format!("body field {pointer}"),
            )
        }
    };
    if values.iter().all(|v| v.trim().is_empty()) {
        return Err(VerifyError::MissingSignature(missing));
    }
    let mut parsed = ParsedSignature::default();
    for value in &values {
        let before = parsed.candidates.len();
        parse_signature_value(
            &spec.format,
            &spec.prefix,
            spec.algorithm,
            spec.encoding,
            value,
            &mut parsed,
        )
        .map_err(|e| match e {
            ParseError::TooMany => VerifyError::MalformedSignature("too many signatures"),
            ParseError::Unusable => VerifyError::MalformedSignature("two timestamps"),
        })?;
        if every_must_match && parsed.candidates.len() == before {
            // A value that yields no signature cannot be let through beside good ones.
            return Err(VerifyError::MalformedSignature(
                "a signature value is unusable",
            ));
        }
    }
    if parsed.candidates.is_empty() {
        return Err(VerifyError::MalformedSignature("no decodable signature"));
    }
    Ok((parsed, every_must_match))
}
