//! Signature value parsing: from a header (or body field) to decoded candidate signatures.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;

use super::definition::{Algorithm, Encoding, SignatureFormat};

/// Padding is optional on input: senders (and Svix's own library) disagree on it.
pub(crate) const BASE64_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The most candidate signatures one request may carry. Rotation needs two or three; each
/// candidate may cost a public-key operation per key, so a header of a thousand entries is
/// refused instead of checked.
pub const MAX_CANDIDATES: usize = 32;

/// One decoded signature and the algorithm it claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub algorithm: Algorithm,
    pub bytes: Vec<u8>,
}

/// What a signature value holds once parsed: decoded candidates and maybe a timestamp.
#[derive(Debug, Default)]
pub struct ParsedSignature {
    pub candidates: Vec<Candidate>,
    pub timestamp: Option<String>,
}

/// Why a signature value cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Nothing decodable (or a second timestamp, which makes the signed string ambiguous).
    Unusable,
    TooMany,
}

/// Parses one value into `into`. Candidates that do not decode are dropped: a header with
/// one good and one garbled signature still verifies through the good one, as providers
/// expect during rotation. `prefix` must start every signature, and is stripped.
pub fn parse_signature_value(
    format: &SignatureFormat,
    prefix: &str,
    algorithm: Algorithm,
    encoding: Encoding,
    value: &str,
    into: &mut ParsedSignature,
) -> Result<(), ParseError> {
    let push = |into: &mut ParsedSignature, algorithm: Algorithm, sig: &str| {
        if let Some(bytes) = sig.strip_prefix(prefix).and_then(|s| decode(encoding, s)) {
            if into.candidates.len() == MAX_CANDIDATES {
                return Err(ParseError::TooMany);
            }
            into.candidates.push(Candidate { algorithm, bytes });
        }
        Ok(())
    };
    match format {
        SignatureFormat::Raw => {
            // A token is compared as sent; a MAC's surrounding whitespace is not part of it.
            let v = if encoding == Encoding::Text {
                value
            } else {
                value.trim()
            };
            push(into, algorithm, v)?;
        }
        SignatureFormat::KeyValue {
            pair_separator,
            kv_separator,
            signature_keys,
            timestamp_key,
        } => {
            for pair in value.split(pair_separator.as_str()) {
                let Some((k, v)) = pair.trim().split_once(kv_separator.as_str()) else {
                    continue;
                };
                if timestamp_key.as_deref() == Some(k) {
                    if into.timestamp.is_some() {
                        return Err(ParseError::Unusable);
                    }
                    into.timestamp = Some(v.to_owned());
                } else if signature_keys.iter().any(|s| s == k) {
                    push(into, algorithm, v)?;
                }
            }
        }
        SignatureFormat::List {
            list_separator,
            item_separator,
            versions,
        } => {
            for item in value.split(list_separator.as_str()) {
                let Some((version, sig)) = item.split_once(item_separator.as_str()) else {
                    continue;
                };
                if let Some((_, algorithm)) = versions.iter().find(|(v, _)| v == version) {
                    push(into, *algorithm, sig)?;
                }
            }
        }
    }
    Ok(())
}

/// Parses a whole header value; `None` when nothing usable is present. Exposed for
/// property tests and fuzzing.
pub fn parse_signature_header(
    format: &SignatureFormat,
    prefix: &str,
    algorithm: Algorithm,
    encoding: Encoding,
    value: &str,
) -> Option<ParsedSignature> {
    let mut parsed = ParsedSignature::default();
    parse_signature_value(format, prefix, algorithm, encoding, value, &mut parsed).ok()?;
    (!parsed.candidates.is_empty()).then_some(parsed)
}

fn decode(encoding: Encoding, s: &str) -> Option<Vec<u8>> {
    if s.is_empty() {
        return None;
    }
    match encoding {
        // hex::decode accepts either case: providers send lower-case, some proxies upper-case it.
        Encoding::Hex => hex::decode(s).ok(),
        Encoding::Base64 => BASE64_LENIENT.decode(s).ok(),
        Encoding::Text => Some(s.as_bytes().to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv() -> SignatureFormat {
        SignatureFormat::KeyValue {
            pair_separator: ",".into(),
            kv_separator: "=".into(),
            signature_keys: vec!["v1".into()],
            timestamp_key: Some("t".into()),
        }
    }

    fn bytes(p: &ParsedSignature) -> Vec<Vec<u8>> {
        p.candidates.iter().map(|c| c.bytes.clone()).collect()
    }

    const H: Algorithm = Algorithm::HmacSha256;

    #[test]
    fn kv_collects_every_v1_and_ignores_v0() {
        let p =
            parse_signature_header(&kv(), "", H, Encoding::Hex, "t=5,v1=aa,v0=bb,v1=CC").unwrap();
        assert_eq!(p.timestamp.as_deref(), Some("5"));
        assert_eq!(bytes(&p), vec![vec![0xaa], vec![0xcc]]);
    }

    #[test]
    fn kv_refuses_two_timestamps() {
        assert!(parse_signature_header(&kv(), "", H, Encoding::Hex, "t=5,t=6,v1=aa").is_none());
    }

    #[test]
    fn the_prefix_is_required_in_every_format() {
        let raw = SignatureFormat::Raw;
        assert!(parse_signature_header(&raw, "sha256=", H, Encoding::Hex, "aa").is_none());
        assert!(parse_signature_header(&raw, "sha256=", H, Encoding::Hex, "sha256=aa").is_some());
        assert!(parse_signature_header(&raw, "sha256=", H, Encoding::Hex, "sha256=").is_none());
        let p = parse_signature_header(&kv(), "x", H, Encoding::Hex, "t=1,v1=aa,v1=xbb").unwrap();
        assert_eq!(bytes(&p), vec![vec![0xbb]]);
    }

    #[test]
    fn list_versions_carry_their_algorithm() {
        let list = SignatureFormat::List {
            list_separator: " ".into(),
            item_separator: ",".into(),
            versions: vec![("v1".into(), H), ("v1a".into(), Algorithm::Ed25519)],
        };
        let p = parse_signature_header(&list, "", H, Encoding::Base64, "v1,qg== v1a,uw== v2,zA==")
            .unwrap();
        let algs: Vec<_> = p.candidates.iter().map(|c| c.algorithm).collect();
        assert_eq!(algs, vec![H, Algorithm::Ed25519]);
    }

    #[test]
    fn a_thousand_signatures_are_refused() {
        let value = vec!["v1=aa"; 1000].join(",");
        assert!(parse_signature_header(&kv(), "", H, Encoding::Hex, &value).is_none());
        let value = vec!["v1=aa"; MAX_CANDIDATES].join(",");
        assert!(parse_signature_header(&kv(), "", H, Encoding::Hex, &value).is_some());
    }
}
