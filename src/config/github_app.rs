//! A GitHub App's credential for reconciling the App's own webhook: its id and RSA private
//! key, and the JWTs made from them (RS256, `iat` a minute back for clock drift, `exp` nine
//! minutes on, `iss` the App id), one reused until a minute before it expires.
//! <https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-json-web-token-jwt-for-a-github-app>

use std::fmt;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs1v15::SigningKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::sha2::Sha256;
use rsa::signature::{SignatureEncoding, Signer};
use rsa::RsaPrivateKey;
use secrecy::{ExposeSecret, SecretString};

/// Backdated by this much, for a clock running ahead of GitHub's (GitHub's advice).
const IAT_BACKDATE_SECS: i64 = 60;
/// Valid this long from now; GitHub refuses a JWT valid for more than 10 minutes.
const EXP_AHEAD_SECS: i64 = 9 * 60;
/// A cached JWT is replaced once it has less than this left.
const RENEW_BEFORE_SECS: i64 = 60;

/// The App's id and private key. Debug shows the id only.
#[derive(Clone)]
pub struct GitHubApp {
    pub app_id: u64,
    key: SigningKey<Sha256>,
    /// The last JWT made and its `exp`.
    cached: Arc<Mutex<Option<(String, i64)>>>,
}

impl fmt::Debug for GitHubApp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitHubApp")
            .field("app_id", &self.app_id)
            .field("private_key", &"[redacted]")
            .finish()
    }
}

impl PartialEq for GitHubApp {
    fn eq(&self, other: &Self) -> bool {
        self.app_id == other.app_id && self.key.as_ref() == other.key.as_ref()
    }
}
impl Eq for GitHubApp {}

impl GitHubApp {
    /// The App `app_id` with the private key `pem`: PKCS#1 (`BEGIN RSA PRIVATE KEY`, as
    /// GitHub issues them) or PKCS#8 (`BEGIN PRIVATE KEY`). The problem names no key material.
    pub fn new(app_id: u64, pem: &SecretString) -> Result<Self, String> {
        let pem = pem.expose_secret().trim();
        let key = if pem.starts_with("-----BEGIN RSA PRIVATE KEY-----") {
            RsaPrivateKey::from_pkcs1_pem(pem)
                .map_err(|e| format!("is not a PKCS#1 RSA private key: {e}"))?
        } else if pem.starts_with("-----BEGIN PRIVATE KEY-----") {
            RsaPrivateKey::from_pkcs8_pem(pem)
                .map_err(|e| format!("is not a PKCS#8 RSA private key: {e}"))?
        } else {
            return Err(
                "is not a PEM RSA private key (\"-----BEGIN RSA PRIVATE KEY-----\" as GitHub issues them, or PKCS#8 \"-----BEGIN PRIVATE KEY-----\")"
                    .into(),
            );
        };
        Ok(Self {
            app_id,
            key: SigningKey::new(key),
            cached: Arc::default(),
        })
    }

    /// A JWT valid now, reused while it has more than a minute left.
    pub fn jwt(&self, now: i64) -> String {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((jwt, exp)) = cached.as_ref() {
            if now + RENEW_BEFORE_SECS < *exp && now + EXP_AHEAD_SECS >= *exp {
                return jwt.clone();
            }
        }
        let exp = now + EXP_AHEAD_SECS;
        let jwt = self.encode(now - IAT_BACKDATE_SECS, exp);
        *cached = Some((jwt.clone(), exp));
        jwt
    }

    /// `header.claims.signature`, each base64url without padding, RS256 over the first two.
    fn encode(&self, iat: i64, exp: i64) -> String {
        let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"RS256","typ":"JWT"}"#);
        let claims = serde_json::json!({"iat": iat, "exp": exp, "iss": self.app_id.to_string()});
        let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
        let input = format!("{header}.{claims}");
        let signature = self.key.sign(input.as_bytes()).to_vec();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsa::pkcs1v15::{Signature, VerifyingKey};
    use rsa::pkcs8::{EncodePrivateKey, LineEnding};
    use rsa::signature::Verifier;

    const PEM: &str = include_str!("../../tools/testkit/keys/github-app-test.pem");

    fn part(jwt: &str, i: usize) -> Vec<u8> {
        URL_SAFE_NO_PAD
            .decode(jwt.split('.').nth(i).unwrap())
            .unwrap()
    }

    #[test]
    fn the_jwt_verifies_with_the_public_key_and_holds_the_claims() {
        let app = GitHubApp::new(42, &PEM.to_owned().into()).unwrap();
        let now = 1_700_000_000;
        let jwt = app.jwt(now);
        assert_eq!(jwt.split('.').count(), 3);
        assert!(!jwt.contains('='));
        assert_eq!(part(&jwt, 0), br#"{"alg":"RS256","typ":"JWT"}"#);
        let claims: serde_json::Value = serde_json::from_slice(&part(&jwt, 1)).unwrap();
        assert_eq!(
            claims,
            serde_json::json!({"iat": now - 60, "exp": now + 540, "iss": "42"})
        );
        let public = RsaPrivateKey::from_pkcs1_pem(PEM).unwrap().to_public_key();
        let (input, _) = jwt.rsplit_once('.').unwrap();
        let signature = Signature::try_from(part(&jwt, 2).as_slice()).unwrap();
        VerifyingKey::<Sha256>::new(public)
            .verify(input.as_bytes(), &signature)
            .unwrap();
        // Reused while over a minute is left, then replaced.
        assert_eq!(app.jwt(now + 400), jwt);
        assert_ne!(app.jwt(now + 500), jwt);
    }

    #[test]
    fn reads_pkcs1_and_pkcs8_and_refuses_the_rest_without_echoing_it() {
        let pkcs8 = RsaPrivateKey::from_pkcs1_pem(PEM)
            .unwrap()
            .to_pkcs8_pem(LineEnding::LF)
            .unwrap();
        let a = GitHubApp::new(1, &PEM.to_owned().into()).unwrap();
        let b = GitHubApp::new(1, &pkcs8.as_str().to_owned().into()).unwrap();
        assert_eq!(a, b);
        assert!(!format!("{a:?}").contains("BEGIN"));
        let e = GitHubApp::new(1, &"ghp_not_a_key".to_owned().into()).unwrap_err();
        assert!(
            e.contains("not a PEM RSA private key") && !e.contains("ghp_"),
            "{e}"
        );
        let broken = PEM.replace("MII", "MIX");
        let e = GitHubApp::new(1, &broken.into()).unwrap_err();
        assert!(e.contains("PKCS#1"), "{e}");
    }
}
