//! Public-key signatures (Discord's and Standard Webhooks' Ed25519, SendGrid's ECDSA P-256),
//! signed here with ed25519-dalek and p256: accepted as signed, refused after any change to
//! the signature, the message or the key, alone and in a batch of Ed25519 checks as ingest
//! makes them; public keys that do not parse are a load error.

use crate::common::*;
use crate::sources::*;

use ed25519_dalek::Signer as _;
use hookgate::verify::Ed25519Batch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Discord,
    /// Standard Webhooks' `v1a`, with a `whpk_` key.
    Svix,
    SendGrid,
}

impl Scheme {
    fn provider(self) -> &'static str {
        match self {
            Scheme::Discord => "discord",
            Scheme::Svix => "standard-webhooks",
            Scheme::SendGrid => "sendgrid",
        }
    }

    fn algorithm(self) -> Algorithm {
        match self {
            Scheme::SendGrid => Algorithm::EcdsaP256Sha256,
            _ => Algorithm::Ed25519,
        }
    }

    /// The bytes each provider signs, from its documentation.
    fn message(self, id: &str, ts: &str, body: &[u8]) -> Vec<u8> {
        let head = match self {
            Scheme::Svix => format!("{id}.{ts}."),
            _ => ts.to_owned(),
        };
        [head.as_bytes(), body].concat()
    }

    /// `None` for a scalar P-256 cannot use (zero, or not below the group order).
    fn sign(self, seed: &[u8; 32], message: &[u8]) -> Option<Vec<u8>> {
        Some(match self {
            Scheme::SendGrid => {
                let key = p256::ecdsa::SigningKey::from_bytes(&(*seed).into()).ok()?;
                let sig: p256::ecdsa::Signature = key.sign(message);
                sig.to_der().as_bytes().to_vec()
            }
            _ => ed25519_dalek::SigningKey::from_bytes(seed)
                .sign(message)
                .to_bytes()
                .to_vec(),
        })
    }

    fn headers(self, id: &str, ts: &str, sig: &[u8]) -> RequestHeaders {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let pairs: Vec<(&str, String)> = match self {
            Scheme::Discord => vec![
                ("x-signature-ed25519", hex::encode(sig)),
                ("x-signature-timestamp", ts.to_owned()),
            ],
            // A decoy HMAC entry before the real one: a public-key source ignores it.
            Scheme::Svix => vec![
                (
                    "webhook-signature",
                    format!("v1,{} v1a,{}", b64(&[0; 32]), b64(sig)),
                ),
                ("webhook-id", id.to_owned()),
                ("webhook-timestamp", ts.to_owned()),
            ],
            Scheme::SendGrid => vec![
                ("x-twilio-email-event-webhook-signature", b64(sig)),
                ("x-twilio-email-event-webhook-timestamp", ts.to_owned()),
            ],
        };
        pairs.into_iter().collect()
    }

    fn verifier(self, seed: &[u8; 32]) -> SourceVerifier {
        let def = definition(self.provider());
        let key = encode_public(&def, &public_key_bytes(self.algorithm(), seed));
        SourceVerifier::new(def, &[&key]).expect("a valid public key")
    }
}

/// The key of the valid requests that share a batch with the one under test.
const NEIGHBOUR_SEED: [u8; 32] = [0x6e; 32];

/// The request verified as ingest verifies it: in one batch of Ed25519 checks with three valid
/// Discord requests of another key, which must pass whatever the request is.
fn verify_in_a_batch(
    verifier: &SourceVerifier,
    headers: &RequestHeaders,
    body: &[u8],
) -> Result<Verified, VerifyError> {
    let neighbour = Scheme::Discord.verifier(&NEIGHBOUR_SEED);
    let ts = NOW.to_string();
    let neighbours: Vec<(RequestHeaders, Vec<u8>)> = (0..3)
        .map(|n| {
            let body = format!(r#"{{"id":"n{n}","type":2}}"#).into_bytes();
            let message = Scheme::Discord.message("", &ts, &body);
            let sig = Scheme::Discord.sign(&NEIGHBOUR_SEED, &message).unwrap();
            (Scheme::Discord.headers("", &ts, &sig), body)
        })
        .collect();
    let batch = Ed25519Batch::new();
    // One thread, as one HTTP worker: polled first, the request under test leads the batch.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (target, others) = runtime.block_on(futures_util::future::join(
        batched(verifier, headers, body, &batch),
        futures_util::future::join_all(
            neighbours
                .iter()
                .map(|(h, b)| batched(&neighbour, h, b, &batch)),
        ),
    ));
    for other in others {
        assert!(
            other.is_ok(),
            "a valid neighbour was refused: {:?}",
            other.err()
        );
    }
    target
}

async fn batched(
    verifier: &SourceVerifier,
    headers: &RequestHeaders,
    body: &[u8],
    batch: &Ed25519Batch,
) -> Result<Verified, VerifyError> {
    post(headers, body, "")
        .verify_batched_or_return(verifier, NOW, batch)
        .await
        .map_err(|r| r.error)
}

fn scheme() -> impl Strategy<Value = Scheme> {
    select(vec![Scheme::Discord, Scheme::Svix, Scheme::SendGrid])
}

#[derive(Debug, Clone)]
enum Change {
    /// One bit of the signature's bytes.
    Signature(prop::sample::Index, u8),
    /// One bit of the body.
    Body(prop::sample::Index, u8),
    /// The timestamp moved by some seconds (still within the tolerance).
    Timestamp(i64),
    /// The source configured with another key.
    Key([u8; 32]),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(i, b)| Change::Signature(i, b)),
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(i, b)| Change::Body(i, b)),
        prop_oneof![-100i64..0, 1i64..100].prop_map(Change::Timestamp),
        any::<[u8; 32]>().prop_map(Change::Key),
    ]
}

/// Keys as configured that are not keys: random bytes of any length, a wrong length, 100 KB,
/// or text that is not the encoding at all.
fn not_a_key() -> impl Strategy<Value = KeyText> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..100).prop_map(KeyText::Bytes),
        (
            any::<u8>(),
            prop_oneof![Just(100_000usize), 1usize..31, 33usize..70]
        )
            .prop_map(|(b, n)| KeyText::Bytes(vec![b; n])),
        // A P-256 SubjectPublicKeyInfo header before a point that is not on the curve.
        proptest::collection::vec(any::<u8>(), 64).prop_map(|xy| {
            let mut der = hex::decode(P256_SPKI_HEADER).unwrap();
            der.push(4);
            der.extend(xy);
            KeyText::Bytes(der)
        }),
        any::<String>().prop_map(KeyText::Text),
        Just(KeyText::Text("z".repeat(100_000))),
    ]
}

#[derive(Debug, Clone)]
enum KeyText {
    /// Encoded as the definition's public keys are.
    Bytes(Vec<u8>),
    /// As it is.
    Text(String),
}

/// Whether `bytes` are a usable public key for `algorithm` (the libraries' own parsers decide).
fn is_key(algorithm: Algorithm, bytes: &[u8]) -> bool {
    match algorithm {
        // A point of small order parses, and is refused as a weak key.
        Algorithm::Ed25519 => <[u8; 32]>::try_from(bytes).is_ok_and(|raw| {
            ed25519_dalek::VerifyingKey::from_bytes(&raw).is_ok_and(|k| !k.is_weak())
        }),
        _ => {
            use p256::pkcs8::DecodePublicKey as _;
            p256::ecdsa::VerifyingKey::from_public_key_der(bytes).is_ok()
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// Signed with a random key, body, id and time within the tolerance: accepted; then one
    /// change to the signature, the message (body or timestamp) or the key: refused as an
    /// invalid signature, before anything else is looked at.
    #[test]
    fn any_change_to_signature_message_or_key_is_refused(
        scheme in scheme(),
        seed in any::<[u8; 32]>(),
        id in "[A-Za-z0-9_]{1,24}",
        offset in -TOLERANCE..=TOLERANCE,
        pad in "[ -~]{0,64}",
        change in change(),
    ) {
        let ts = (NOW + offset).to_string();
        let body = serde_json::to_vec(&serde_json::json!({"id": id, "type": 2, "pad": pad})).unwrap();
        let Some(sig) = scheme.sign(&seed, &scheme.message(&id, &ts, &body)) else {
            return Ok(());
        };
        let verifier = scheme.verifier(&seed);
        let headers = scheme.headers(&id, &ts, &sig);
        let result = verify_signed(&verifier, &headers, &body, "");
        prop_assert!(matches!(result, Ok(Verified::Event(_))), "{:?} refused: {:?}", scheme, result);
        let batched = verify_in_a_batch(&verifier, &headers, &body);
        prop_assert!(matches!(batched, Ok(Verified::Event(_))), "{:?} refused in a batch: {:?}", scheme, batched);

        let (mut sig, mut body, mut ts, mut verifier) = (sig, body, ts, verifier);
        match change {
            Change::Signature(i, b) => {
                let i = i.index(sig.len());
                sig[i] ^= 1 << b;
            }
            Change::Body(i, b) => {
                let i = i.index(body.len());
                body[i] ^= 1 << b;
            }
            Change::Timestamp(by) => ts = (NOW + offset + by).to_string(),
            Change::Key(other) => {
                let other_key = scheme.sign(&other, b"probe").is_some()
                    && public_key_bytes(scheme.algorithm(), &other)
                        != public_key_bytes(scheme.algorithm(), &seed);
                prop_assume!(other_key);
                verifier = scheme.verifier(&other);
            }
        }
        let headers = scheme.headers(&id, &ts, &sig);
        let result = verify_signed(&verifier, &headers, &body, "");
        // The signature is checked before the timestamp's tolerance: a timestamp moved out
        // of it is refused for the signature too.
        prop_assert_eq!(result.err(), Some(VerifyError::InvalidSignature), "{:?} after {:?}", scheme, change);
        let batched = verify_in_a_batch(&verifier, &headers, &body);
        prop_assert_eq!(batched.err(), Some(VerifyError::InvalidSignature), "{:?} after {:?} in a batch", scheme, change);
    }

    /// A public key that does not parse is refused when the source is built, with the index
    /// of the offending key: never a panic, never a source that fails per request.
    #[test]
    fn public_keys_that_do_not_parse_are_a_load_error(
        scheme in scheme(),
        bad in not_a_key(),
        first in any::<bool>(),
    ) {
        let def = definition(scheme.provider());
        let (text, valid) = match &bad {
            KeyText::Bytes(b) => (encode_public(&def, b), is_key(scheme.algorithm(), b)),
            KeyText::Text(t) => (t.clone(), false),
        };
        // Standard Webhooks reads a value without `whpk_` as a secret, which may be usable.
        prop_assume!(scheme != Scheme::Svix || text.starts_with("whpk_"));
        let good = encode_public(&def, &public_key_bytes(scheme.algorithm(), &SEED));
        let keys: Vec<&str> = if first { vec![&text, &good] } else { vec![&good, &text] };
        match SourceVerifier::new(def, &keys) {
            Ok(_) => prop_assert!(valid, "{:?} took {:?}", scheme, bad),
            Err((index, problem)) => {
                prop_assert!(!valid, "{:?} refused a valid key: {}", scheme, problem);
                prop_assert_eq!(index, usize::from(!first));
            }
        }
    }
}

/// Ed25519 is checked strictly, alone and in a batch: a signature whose S is not reduced
/// (S + L, the same signature for a lenient verifier) is refused, so a captured request
/// cannot be re-sent with a second valid signature.
#[test]
fn non_canonical_ed25519_signatures_are_refused() {
    // The group order L, little-endian.
    const L: [u8; 32] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde,
        0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    ];
    let ts = NOW.to_string();
    let body = br#"{"id":"1","type":2}"#;
    let message = Scheme::Discord.message("", &ts, body);
    let verifier = Scheme::Discord.verifier(&SEED);
    let mut tried = 0;
    for i in 0..64u8 {
        let mut sig = Scheme::Discord.sign(&[i; 32], &message).unwrap();
        let verifier_i = Scheme::Discord.verifier(&[i; 32]);
        let headers = Scheme::Discord.headers("", &ts, &sig);
        assert!(verify_signed(&verifier_i, &headers, body, "").is_ok());
        // S + L, when it still fits in 253 bits as an unreduced scalar.
        let mut carry = 0u16;
        for (s, l) in sig[32..].iter_mut().zip(L) {
            let sum = u16::from(*s) + u16::from(l) + carry;
            *s = sum as u8;
            carry = sum >> 8;
        }
        if carry != 0 || sig[63] & 0xe0 != 0 {
            continue;
        }
        tried += 1;
        let headers = Scheme::Discord.headers("", &ts, &sig);
        assert_eq!(
            verify_signed(&verifier_i, &headers, body, "").err(),
            Some(VerifyError::InvalidSignature)
        );
        assert_eq!(
            verify_in_a_batch(&verifier_i, &headers, body).err(),
            Some(VerifyError::InvalidSignature)
        );
        assert!(verify_signed(&verifier, &headers, body, "").is_err());
    }
    assert!(tried > 0);
}
