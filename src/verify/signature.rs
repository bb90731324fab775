//! Signature header parsing, key derivation and the MAC itself.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretSlice};
use subtle::ConstantTimeEq;

use super::definition::{Algorithm, Encoding, SecretEncoding, SecretSpec, SignatureFormat};

/// Padding is optional on input: senders (and Svix's own library) disagree on it.
pub(crate) const BASE64_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// What a signature header holds once parsed: decoded candidate MACs and maybe a timestamp.
#[derive(Debug, Default)]
pub struct ParsedSignature {
    pub candidates: Vec<Vec<u8>>,
    pub timestamp: Option<String>,
}

/// Parses a header value. Candidates that do not decode are dropped: a header with one
/// good and one garbled signature still verifies through the good one, as providers expect
/// during rotation. Returns `None` when nothing usable is present.
pub fn parse_signature_header(
    format: &SignatureFormat,
    encoding: Encoding,
    value: &str,
) -> Option<ParsedSignature> {
    let mut parsed = ParsedSignature::default();
    match format {
        SignatureFormat::Raw { prefix } => {
            let sig = value.trim().strip_prefix(prefix.as_str())?;
            parsed.candidates.extend(decode(encoding, sig));
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
                    if parsed.timestamp.is_some() {
                        // Two timestamps make the signed string ambiguous: refuse the header.
                        return None;
                    }
                    parsed.timestamp = Some(v.to_owned());
                } else if signature_keys.iter().any(|s| s == k) {
                    parsed.candidates.extend(decode(encoding, v));
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
                if versions.iter().any(|v| v == version) {
                    parsed.candidates.extend(decode(encoding, sig));
                }
            }
        }
    }
    if parsed.candidates.is_empty() {
        None
    } else {
        Some(parsed)
    }
}

fn decode(encoding: Encoding, s: &str) -> Option<Vec<u8>> {
    if s.is_empty() {
        return None;
    }
    match encoding {
        // hex::decode accepts either case: providers send lower-case, some proxies upper-case it.
        Encoding::Hex => hex::decode(s).ok(),
        Encoding::Base64 => BASE64_LENIENT.decode(s).ok(),
    }
}

/// A secret turned into MAC key bytes as the provider's scheme says.
pub struct SecretKey(SecretSlice<u8>);

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey([redacted])")
    }
}

impl SecretKey {
    pub fn derive(spec: &SecretSpec, secret: &str) -> Result<Self, &'static str> {
        if secret.is_empty() {
            return Err("is empty");
        }
        let body = secret
            .strip_prefix(spec.strip_prefix.as_str())
            .unwrap_or(secret);
        let bytes = match spec.encoding {
            SecretEncoding::Utf8 => body.as_bytes().to_vec(),
            SecretEncoding::Base64 => BASE64_LENIENT
                .decode(body)
                .map_err(|_| "is not valid base64 after its prefix")?,
        };
        if bytes.is_empty() {
            return Err("is empty after its prefix");
        }
        Ok(Self(bytes.into()))
    }

    pub fn mac(&self, algorithm: Algorithm, message: &[u8]) -> Vec<u8> {
        let key = self.0.expose_secret();
        match algorithm {
            Algorithm::HmacSha1 => run_mac::<Hmac<sha1::Sha1>>(key, message),
            Algorithm::HmacSha256 => run_mac::<Hmac<sha2::Sha256>>(key, message),
            Algorithm::HmacSha512 => run_mac::<Hmac<sha2::Sha512>>(key, message),
        }
    }
}

fn run_mac<M: Mac + hmac::digest::KeyInit>(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac =
        <M as hmac::digest::KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// Constant-time over equal lengths; a length mismatch reveals only the algorithm's output size.
pub fn macs_equal(expected: &[u8], candidate: &[u8]) -> bool {
    expected.len() == candidate.len() && bool::from(expected.ct_eq(candidate))
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

    #[test]
    fn kv_collects_every_v1_and_ignores_v0() {
        let p = parse_signature_header(&kv(), Encoding::Hex, "t=5,v1=aa,v0=bb,v1=CC").unwrap();
        assert_eq!(p.timestamp.as_deref(), Some("5"));
        assert_eq!(p.candidates, vec![vec![0xaa], vec![0xcc]]);
    }

    #[test]
    fn kv_refuses_two_timestamps() {
        assert!(parse_signature_header(&kv(), Encoding::Hex, "t=5,t=6,v1=aa").is_none());
    }

    #[test]
    fn raw_requires_the_prefix() {
        let raw = SignatureFormat::Raw {
            prefix: "sha256=".into(),
        };
        assert!(parse_signature_header(&raw, Encoding::Hex, "aa").is_none());
        assert!(parse_signature_header(&raw, Encoding::Hex, "sha256=aa").is_some());
        assert!(parse_signature_header(&raw, Encoding::Hex, "sha256=").is_none());
    }

    #[test]
    fn base64_secret_must_decode() {
        let spec = SecretSpec {
            encoding: SecretEncoding::Base64,
            strip_prefix: "whsec_".into(),
        };
        assert!(SecretKey::derive(&spec, "whsec_!!!").is_err());
        assert!(SecretKey::derive(&spec, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_ok());
        assert!(SecretKey::derive(&spec, "").is_err());
    }
}
