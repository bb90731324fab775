//! GitHub App JWTs as GitHub checks them, for the fake's `/app/hook/...` endpoints: RS256
//! over `header.claims` with the App's public key, `iss` the App id, valid now, and valid
//! for at most 10 minutes (`exp - iat <= 600`). Two fixed 2048-bit test keys (PKCS#1 PEM,
//! as GitHub issues them): the App's, and another that is not.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::sha2::Sha256;
use rsa::signature::Verifier;
use rsa::{RsaPrivateKey, RsaPublicKey};
use serde_json::Value;

/// The test App's private key.
pub const APP_PRIVATE_KEY: &str = include_str!("../keys/github-app-test.pem");
/// A valid RSA key that is not the App's: its JWTs do not verify.
pub const OTHER_PRIVATE_KEY: &str = include_str!("../keys/github-app-other.pem");

/// The public key of a PKCS#1 PEM private key.
pub fn public_key(private_pem: &str) -> RsaPublicKey {
    RsaPrivateKey::from_pkcs1_pem(private_pem)
        .expect("a PKCS#1 test key")
        .to_public_key()
}

/// Why `authorization` is not a valid JWT of App `app_id` signed by `public`, at `now`.
pub fn check_jwt(
    authorization: Option<&str>,
    app_id: u64,
    public: &RsaPublicKey,
    now: i64,
) -> Result<(), String> {
    let jwt = authorization
        .and_then(|a| a.strip_prefix("Bearer "))
        .ok_or("no bearer token")?;
    let (input, signature) = jwt.rsplit_once('.').ok_or("not a JWT")?;
    let (header, claims) = input.split_once('.').ok_or("not a JWT")?;
    let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|e| e.to_string());
    let header: Value = serde_json::from_slice(&decode(header)?).map_err(|e| e.to_string())?;
    if header["alg"] != "RS256" || header["typ"] != "JWT" {
        return Err(format!("header {header}"));
    }
    let signature =
        Signature::try_from(decode(signature)?.as_slice()).map_err(|e| e.to_string())?;
    VerifyingKey::<Sha256>::new(public.clone())
        .verify(input.as_bytes(), &signature)
        .map_err(|_| "the signature does not verify".to_owned())?;
    let claims: Value = serde_json::from_slice(&decode(claims)?).map_err(|e| e.to_string())?;
    let iss = app_id.to_string();
    let iss_ok = claims["iss"].as_str() == Some(iss.as_str()) || claims["iss"] == app_id;
    let (iat, exp) = (claims["iat"].as_i64(), claims["exp"].as_i64());
    match (iat, exp) {
        _ if !iss_ok => Err(format!("iss {}", claims["iss"])),
        (Some(iat), Some(exp)) if exp - iat <= 600 && iat <= now && now < exp => Ok(()),
        _ => Err(format!("iat/exp {claims}")),
    }
}
