//! Console sessions: a signed cookie naming the tenant, and CSRF tokens bound to it.
//!
//! The signing key is derived from the configured admin token digests, so every replica with
//! the same configuration accepts the same cookies, and removing a token (or any change to
//! the token list) ends every session.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::AdminToken;
use crate::domain::Name;

pub const SESSION_COOKIE: &str = "hookgate_session";
/// The login form's CSRF cookie (double submit: there is no session yet to bind to).
pub const LOGIN_CSRF_COOKIE: &str = "hookgate_login_csrf";
pub const SESSION_SECONDS: i64 = 8 * 3600;

#[derive(Clone)]
pub struct SessionKey([u8; 32]);

impl SessionKey {
    pub fn derive(tokens: &[AdminToken]) -> Self {
        let mut h = Sha256::new();
        h.update(b"hookgate console session key v1");
        for t in tokens {
            h.update(t.tenant.as_str().as_bytes());
            h.update(b"\0");
            h.update(t.sha256);
        }
        Self(h.finalize().into())
    }

    fn mac(&self, parts: &[&[u8]]) -> Vec<u8> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("any key length");
        for p in parts {
            mac.update(p);
            mac.update(b"\0");
        }
        mac.finalize().into_bytes().to_vec()
    }

    /// `tenant.expires.mac`
    pub fn issue(&self, tenant: &Name, now: i64) -> String {
        let expires = (now + SESSION_SECONDS).to_string();
        let mac = self.mac(&[b"session", tenant.as_str().as_bytes(), expires.as_bytes()]);
        format!("{tenant}.{expires}.{}", URL_SAFE_NO_PAD.encode(mac))
    }

    /// The tenant of a valid, unexpired session cookie.
    pub fn open(&self, cookie: &str, now: i64) -> Option<Name> {
        let mut parts = cookie.splitn(3, '.');
        let (tenant, expires, mac) = (parts.next()?, parts.next()?, parts.next()?);
        let given = URL_SAFE_NO_PAD.decode(mac).ok()?;
        let want = self.mac(&[b"session", tenant.as_bytes(), expires.as_bytes()]);
        if !bool::from(want.ct_eq(&given)) || expires.parse::<i64>().ok()? <= now {
            return None;
        }
        Name::parse("tenant", tenant).ok()
    }

    /// The CSRF token every form of this session must carry.
    pub fn csrf(&self, cookie: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(&[b"csrf", cookie.as_bytes()]))
    }

    pub fn csrf_ok(&self, cookie: &str, given: &str) -> bool {
        bool::from(self.csrf(cookie).as_bytes().ct_eq(given.as_bytes()))
    }
}

/// A random token for the login form's double-submit cookie.
pub fn random_token() -> String {
    let mut bytes = [0u8; 24];
    getrandom::getrandom(&mut bytes).expect("the OS provides randomness");
    URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(secret: &str) -> SessionKey {
        SessionKey::derive(&[AdminToken {
            tenant: Name::parse("t", "acme").unwrap(),
            sha256: Sha256::digest(secret.as_bytes()).into(),
        }])
    }

    #[test]
    fn sessions_are_signed_and_expire() {
        let k = key("a");
        let acme = Name::parse("t", "acme").unwrap();
        let cookie = k.issue(&acme, 1000);
        assert_eq!(k.open(&cookie, 1001).unwrap(), acme);
        assert!(k.open(&cookie, 1000 + SESSION_SECONDS).is_none(), "expired");
        assert!(key("b").open(&cookie, 1001).is_none(), "another token list");
        let forged = cookie.replacen("acme", "other", 1);
        assert!(k.open(&forged, 1001).is_none());
        assert!(k.csrf_ok(&cookie, &k.csrf(&cookie)));
        assert!(!k.csrf_ok(&cookie, &k.csrf(&forged)));
    }
}
