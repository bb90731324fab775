//! Signature verification, driven by data in `providers/*.toml`.
//!
//! `Unverified::verify` is the only way to obtain a `Verified`, and ingestion accepts only
//! a `VerifiedEvent`, so no code path can store an unauthenticated request.

mod definition;
mod json_pointer;
mod registry;
mod request;
mod sign;
mod signature;
mod template;
mod verifier;

pub use definition::{
    parse_definition, Algorithm, DefinitionError, Encoding, Location, ProviderDefinition,
    SignatureFormat, SourceOverrides,
};
pub use registry::ProviderRegistry;
pub use request::{HeaderLookup, RequestHeaders, Unverified, Verified, VerifiedEvent};
pub use sign::{sample_body, sign_request, SignedRequest};
/// Exposed for property tests and fuzzing of the header parser.
pub use signature::{parse_signature_header, ParsedSignature};
pub use template::PayloadTemplate;
pub use verifier::{SourceVerifier, VerifyError};

/// Decodes base64 with or without padding, as `whsec_` secrets come both ways.
pub fn decode_base64_lenient(s: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::Engine as _;
    signature::BASE64_LENIENT.decode(s)
}
