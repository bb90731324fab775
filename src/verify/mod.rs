//! Signature verification, driven by data in `providers/*.toml`.
//!
//! `Unverified::verify` is the only way to obtain a `Verified`, and ingestion accepts only
//! a `VerifiedEvent`, so no code path can store an unauthenticated request. The one other
//! way in is `provider_api`: events read from the provider's API over an authenticated call.

mod definition;
mod ed25519_batch;
mod handshake;
mod json_pointer;
mod keys;
pub(crate) mod provider_api;
mod registry;
mod request;
mod sign;
mod signature;
mod signed;
mod source;
mod template;
mod verifier;
mod view;

pub use definition::{
    parse_definition, Algorithm, DefinitionError, Encoding, KeyEncoding, KeySpec, Location,
    ProviderDefinition, SignatureFormat, SignatureSource, SourceOverrides,
};
pub use ed25519_batch::Ed25519Batch;
pub use handshake::HandshakeAnswer;
pub use keys::test_key_pair;
pub use registry::ProviderRegistry;
pub use request::{HeaderLookup, RequestHeaders, Unverified, Verified, VerifiedEvent};
pub use sign::{sample_body, sign_request, SignError, SignedRequest};
/// Exposed for property tests and fuzzing of the signature parser.
pub use signature::{parse_signature_header, Candidate, ParsedSignature, MAX_CANDIDATES};
pub use source::SourceVerifier;
pub use template::{Template, TemplateKind};
pub use verifier::{Rejected, VerifyError};

/// Decodes base64 with or without padding, as `whsec_` secrets come both ways.
pub fn decode_base64_lenient(s: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::Engine as _;
    signature::BASE64_LENIENT.decode(s)
}
