//! Property tests over the parsers that see untrusted or operator-written text: every
//! signature-header format, the provider-definition parser and the signed-payload template
//! parser. No input may panic, and a signature is accepted only when the header really holds
//! the MAC of what was signed.
//!
//! The signers here are written from the providers' documentation, independently of
//! `src/verify`. Case counts are kept moderate (see `CASES`) so the file runs in seconds; the
//! fuzz targets in `fuzz/` (docs/FUZZING.md) search the same parsers for much longer.
//!
//! One test binary; a module per parser family.

mod common;

mod asymmetric;
mod bounds;
mod definitions;
mod headers;
mod providers;
mod routing;
mod signatures;
mod sources;
mod templates;
mod tokens;
