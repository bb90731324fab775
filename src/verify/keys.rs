//! Turning a configured secret into what checks a signature: an HMAC key, a shared token, or
//! an Ed25519 or ECDSA P-256 public key (RustCrypto), and the private keys `hookgate send`
//! signs with for asymmetric schemes.

use hmac::{Hmac, Mac};
use p256::pkcs8::DecodePublicKey as _;
use secrecy::{ExposeSecret, SecretSlice};
use subtle::ConstantTimeEq;

use super::definition::{Algorithm, KeyEncoding, KeySpec};
use super::signature::BASE64_LENIENT;
use base64::Engine as _;

/// One configured secret, ready to check signatures of the algorithms it serves.
pub enum VerifyKey {
    /// An HMAC key; also a shared token's bytes (`token` compares it to the value sent).
    Secret(SecretSlice<u8>),
    Ed25519(ed25519_dalek::VerifyingKey),
    EcdsaP256(p256::ecdsa::VerifyingKey),
}

impl std::fmt::Debug for VerifyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Secret(_) => f.write_str("VerifyKey::Secret([redacted])"),
            Self::Ed25519(_) => f.write_str("VerifyKey::Ed25519"),
            Self::EcdsaP256(_) => f.write_str("VerifyKey::EcdsaP256"),
        }
    }
}

/// Decodes a configured value as `spec` says: prefix stripped, then UTF-8, base64 or hex.
pub(super) fn decode_key(spec: &KeySpec, value: &str) -> Result<Vec<u8>, &'static str> {
    if value.is_empty() {
        return Err("is empty");
    }
    let body = value
        .strip_prefix(spec.strip_prefix.as_str())
        .unwrap_or(value);
    let bytes = match spec.encoding {
        KeyEncoding::Utf8 => body.as_bytes().to_vec(),
        KeyEncoding::Base64 => BASE64_LENIENT
            .decode(body)
            .map_err(|_| "is not valid base64 after its prefix")?,
        KeyEncoding::Hex => hex::decode(body).map_err(|_| "is not valid hex after its prefix")?,
    };
    if bytes.is_empty() {
        return Err("is empty after its prefix");
    }
    Ok(bytes)
}

impl VerifyKey {
    pub fn secret(spec: &KeySpec, value: &str) -> Result<Self, &'static str> {
        Ok(Self::Secret(decode_key(spec, value)?.into()))
    }

    /// A public key for `algorithm`: Ed25519 takes the 32 raw bytes, ECDSA P-256 a DER
    /// SubjectPublicKeyInfo (what SendGrid shows). A key that does not parse is refused at
    /// load time, so no request ever reaches a half-usable key.
    pub fn public(spec: &KeySpec, algorithm: Algorithm, value: &str) -> Result<Self, &'static str> {
        let bytes = decode_key(spec, value)?;
        match algorithm {
            Algorithm::Ed25519 => {
                let raw: [u8; 32] = bytes
                    .as_slice()
                    .try_into()
                    .map_err(|_| "is not a 32-byte Ed25519 public key")?;
                let key = ed25519_dalek::VerifyingKey::from_bytes(&raw)
                    .map_err(|_| "is not a valid Ed25519 public key")?;
                // A small-order key verifies nothing strictly, and would let a batch check
                // pass forgeries (`Ed25519Batch`): refused here, once.
                if key.is_weak() {
                    return Err("is a small-order (weak) Ed25519 public key");
                }
                Ok(Self::Ed25519(key))
            }
            Algorithm::EcdsaP256Sha256 => p256::ecdsa::VerifyingKey::from_public_key_der(&bytes)
                .map(Self::EcdsaP256)
                .map_err(|_| "is not a DER P-256 public key (SubjectPublicKeyInfo)"),
            _ => Err("is not a public-key algorithm"),
        }
    }

    /// Whether this key checks signatures made with `algorithm`.
    pub fn serves(&self, algorithm: Algorithm) -> bool {
        match self {
            Self::Secret(_) => !algorithm.is_asymmetric(),
            Self::Ed25519(_) => algorithm == Algorithm::Ed25519,
            Self::EcdsaP256(_) => algorithm == Algorithm::EcdsaP256Sha256,
        }
    }

    /// Checks `signature` over `message`; constant time where a secret is involved.
    pub fn check(&self, algorithm: Algorithm, message: &[u8], signature: &[u8]) -> bool {
        match (self, algorithm) {
            (Self::Secret(key), Algorithm::Token) => bytes_equal(key.expose_secret(), signature),
            (Self::Secret(key), _) if !algorithm.is_asymmetric() => {
                match hmac(algorithm, key.expose_secret(), message) {
                    Some(mac) => bytes_equal(&mac, signature),
                    None => false,
                }
            }
            (Self::Ed25519(key), Algorithm::Ed25519) => {
                let Ok(sig) = ed25519_dalek::Signature::from_slice(signature) else {
                    return false;
                };
                // Strict: refuses small-order keys and non-canonical signatures, so one
                // message has one valid signature per key.
                key.verify_strict(message, &sig).is_ok()
            }
            (Self::EcdsaP256(key), Algorithm::EcdsaP256Sha256) => {
                use p256::ecdsa::signature::Verifier as _;
                // DER, as SendGrid sends it and its libraries read it.
                p256::ecdsa::Signature::from_der(signature)
                    .is_ok_and(|sig| key.verify(message, &sig).is_ok())
            }
            _ => false,
        }
    }

    /// The HMAC of `message` under this secret (Zoom's handshake answer, `hookgate send`).
    pub fn mac(&self, algorithm: Algorithm, message: &[u8]) -> Option<Vec<u8>> {
        match self {
            Self::Secret(key) => hmac(algorithm, key.expose_secret(), message),
            _ => None,
        }
    }

    /// The token's bytes, for `hookgate send` to put in the request.
    pub fn token(&self) -> Option<&[u8]> {
        match self {
            Self::Secret(key) => Some(key.expose_secret()),
            _ => None,
        }
    }
}

#[cfg(test)]
thread_local! {
    /// HMACs computed on this thread, for tests that bound the work per request.
    pub(super) static MACS_COMPUTED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn hmac(algorithm: Algorithm, key: &[u8], message: &[u8]) -> Option<Vec<u8>> {
    #[cfg(test)]
    MACS_COMPUTED.with(|n| n.set(n.get() + 1));
    Some(match algorithm {
        Algorithm::HmacSha1 => run_mac::<Hmac<sha1::Sha1>>(key, message),
        Algorithm::HmacSha256 => run_mac::<Hmac<sha2::Sha256>>(key, message),
        Algorithm::HmacSha512 => run_mac::<Hmac<sha2::Sha512>>(key, message),
        _ => return None,
    })
}

fn run_mac<M: Mac + hmac::digest::KeyInit>(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac =
        <M as hmac::digest::KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// Constant-time over equal lengths; a length mismatch reveals only the expected length.
pub fn bytes_equal(expected: &[u8], candidate: &[u8]) -> bool {
    expected.len() == candidate.len() && bool::from(expected.ct_eq(candidate))
}

/// The DER header of every P-256 SubjectPublicKeyInfo with an uncompressed point
/// (id-ecPublicKey, prime256v1, then a BIT STRING of 66 bytes): what SendGrid shows as its key.
const P256_SPKI_HEADER: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

impl KeySpec {
    /// `bytes` written as this spec reads them: its prefix, then its encoding. `None` when
    /// the spec reads UTF-8 and the bytes are not.
    pub fn write(&self, bytes: &[u8]) -> Option<String> {
        let text = match self.encoding {
            KeyEncoding::Hex => hex::encode(bytes),
            KeyEncoding::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
            KeyEncoding::Utf8 => String::from_utf8(bytes.to_vec()).ok()?,
        };
        Some(format!("{}{text}", self.strip_prefix))
    }
}

/// A test key pair for a public-key provider from a 32-byte seed (an Ed25519 seed, or a
/// P-256 scalar): the public key as a source's `secrets` take it, and the private key as its
/// `signing_key` takes it, both written as the definition's `[public_key]` says. `None` for a
/// provider without a public-key algorithm, or a seed that is no P-256 scalar.
pub fn test_key_pair(
    definition: &super::definition::ProviderDefinition,
    seed: &[u8; 32],
) -> Option<(String, String)> {
    let spec = definition.public_key.as_ref()?;
    let public = match definition.asymmetric_algorithm()? {
        Algorithm::Ed25519 => ed25519_dalek::SigningKey::from_bytes(seed)
            .verifying_key()
            .to_bytes()
            .to_vec(),
        _ => {
            let key = p256::ecdsa::SigningKey::from_bytes(&(*seed).into()).ok()?;
            let mut der = P256_SPKI_HEADER.to_vec();
            der.extend_from_slice(key.verifying_key().to_encoded_point(false).as_bytes());
            der
        }
    };
    Some((spec.write(&public)?, spec.write(seed)?))
}

/// A private key `hookgate send` signs with, for a source of an asymmetric provider.
pub enum SigningKey {
    Ed25519(ed25519_dalek::SigningKey),
    EcdsaP256(p256::ecdsa::SigningKey),
}

impl SigningKey {
    /// Ed25519: the 32-byte seed (Standard Webhooks' `whsk_` keys are base64 seeds);
    /// ECDSA P-256: the 32-byte scalar. Encoded as the definition's public keys are.
    pub fn parse(spec: &KeySpec, algorithm: Algorithm, value: &str) -> Result<Self, &'static str> {
        let value = value
            .strip_prefix("whsk_")
            .map(|rest| format!("{}{rest}", spec.strip_prefix))
            .unwrap_or_else(|| value.to_owned());
        let bytes = decode_key(spec, &value)?;
        let raw: [u8; 32] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| "is not a 32-byte private key")?;
        match algorithm {
            Algorithm::Ed25519 => Ok(Self::Ed25519(ed25519_dalek::SigningKey::from_bytes(&raw))),
            Algorithm::EcdsaP256Sha256 => p256::ecdsa::SigningKey::from_bytes(&raw.into())
                .map(Self::EcdsaP256)
                .map_err(|_| "is not a valid P-256 private key"),
            _ => Err("is not a public-key algorithm"),
        }
    }

    /// Ed25519: the 64-byte signature; ECDSA: DER, as SendGrid sends it.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        match self {
            Self::Ed25519(key) => {
                use ed25519_dalek::Signer as _;
                key.sign(message).to_bytes().to_vec()
            }
            Self::EcdsaP256(key) => {
                use p256::ecdsa::signature::Signer as _;
                let sig: p256::ecdsa::Signature = key.sign(message);
                sig.to_der().as_bytes().to_vec()
            }
        }
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey([redacted])")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(prefix: &str) -> KeySpec {
        KeySpec {
            encoding: KeyEncoding::Base64,
            strip_prefix: prefix.into(),
        }
    }

    /// Standard Webhooks' Go library test vector (TestAsymmetricWebhookSign): the seed signs
    /// exactly the published signature, and its public key verifies it.
    #[test]
    fn standard_webhooks_v1a_vector() {
        let spec = b64("whpk_");
        let signer = SigningKey::parse(
            &spec,
            Algorithm::Ed25519,
            "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=",
        )
        .unwrap();
        let message = br#"msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.{"test": 2432232314}"#;
        let sig = signer.sign(message);
        let published = BASE64_LENIENT
            .decode("tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag==")
            .unwrap();
        assert_eq!(sig, published);
        let key = VerifyKey::public(
            &spec,
            Algorithm::Ed25519,
            "whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g=",
        )
        .unwrap();
        assert!(key.check(Algorithm::Ed25519, message, &sig));
        assert!(!key.check(Algorithm::Ed25519, b"other", &sig));
        assert!(!key.check(Algorithm::HmacSha256, message, &sig));
    }

    /// sendgrid-python's test vector (test/unit/test_eventwebhook.py).
    #[test]
    fn sendgrid_ecdsa_vector() {
        let key = VerifyKey::public(
            &b64(""),
            Algorithm::EcdsaP256Sha256,
            "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==",
        )
        .unwrap();
        let sig = BASE64_LENIENT
            .decode("MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM=")
            .unwrap();
        let mut message = b"1600112502".to_vec();
        message.extend_from_slice(br#"[{"email":"hello@world.com","event":"dropped","reason":"Bounced Address","sg_event_id":"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA","sg_message_id":"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0","smtp-id":"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>","timestamp":1600112492}]"#);
        message.extend_from_slice(b"\r\n");
        assert!(key.check(Algorithm::EcdsaP256Sha256, &message, &sig));
        message[20] ^= 1;
        assert!(!key.check(Algorithm::EcdsaP256Sha256, &message, &sig));
    }

    #[test]
    fn unusable_public_keys_are_refused() {
        let spec = b64("");
        assert!(VerifyKey::public(&spec, Algorithm::Ed25519, "AAAA").is_err());
        // The identity and the point of order 2: valid encodings of small-order points.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let mut order_two = [0xffu8; 32];
        order_two[0] = 0xec;
        order_two[31] = 0x7f;
        for weak in [identity, order_two] {
            let encoded = base64::engine::general_purpose::STANDARD.encode(weak);
            assert_eq!(
                VerifyKey::public(&spec, Algorithm::Ed25519, &encoded).unwrap_err(),
                "is a small-order (weak) Ed25519 public key"
            );
        }
        assert!(VerifyKey::public(&spec, Algorithm::EcdsaP256Sha256, "AAAA").is_err());
        let huge = "A".repeat(100_000);
        assert!(VerifyKey::public(&spec, Algorithm::EcdsaP256Sha256, &huge).is_err());
    }

    #[test]
    fn garbage_signatures_do_not_verify() {
        let signer = SigningKey::parse(&b64(""), Algorithm::EcdsaP256Sha256, &"AQ".repeat(16));
        assert!(signer.is_err(), "a 16-byte scalar is refused");
        let key = VerifyKey::public(
            &b64("whpk_"),
            Algorithm::Ed25519,
            "whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g=",
        )
        .unwrap();
        for sig in [
            &[][..],
            &[0u8; 63][..],
            &[0xff; 64][..],
            &[7u8; 100_000][..],
        ] {
            assert!(!key.check(Algorithm::Ed25519, b"m", sig));
        }
    }
}
