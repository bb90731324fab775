//! Console sessions: a random id in the cookie, its SHA-256 in the database with the tenant
//! and the session's clock, and CSRF tokens bound to the id.
//!
//! Nothing here derives from the configuration: the id is 256 bits from the OS, so reading
//! the config (or the database, which holds only digests) does not let anyone mint a
//! session. A session ends at logout, after `SESSION_SECONDS` in all, or after
//! `SESSION_IDLE_SECONDS` without a request.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::store::StoredSession;

pub const SESSION_COOKIE: &str = "hookgate_session";
/// The login form's CSRF cookie (double submit: there is no session yet to bind to).
pub const LOGIN_CSRF_COOKIE: &str = "hookgate_login_csrf";
/// The absolute limit of a session, however active.
pub const SESSION_SECONDS: i64 = 8 * 3600;
/// A session with no request for this long has ended.
pub const SESSION_IDLE_SECONDS: i64 = 30 * 60;
/// Activity is written at most this often, so browsing does not cost a write per page.
const TOUCH_EVERY_SECONDS: i64 = 60;

const ID_BYTES: usize = 32;

/// A session id: what the cookie holds.
#[derive(Clone)]
pub struct SessionId([u8; ID_BYTES]);

impl SessionId {
    pub fn generate() -> Self {
        let mut bytes = [0u8; ID_BYTES];
        getrandom::getrandom(&mut bytes).expect("the OS provides randomness");
        Self(bytes)
    }

    /// The id in a cookie value; anything but the exact encoding of 32 bytes is no id.
    pub fn parse(cookie: &str) -> Option<Self> {
        let bytes = URL_SAFE_NO_PAD.decode(cookie).ok()?;
        Some(Self(bytes.try_into().ok()?))
    }

    pub fn cookie_value(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0)
    }

    /// What the database keys the session by.
    pub fn digest(&self) -> [u8; 32] {
        Sha256::digest(self.0).into()
    }

    /// The CSRF token every form of this session must carry.
    pub fn csrf(&self) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("any key length");
        mac.update(b"hookgate console csrf v1");
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    pub fn csrf_ok(&self, given: &str) -> bool {
        bool::from(self.csrf().as_bytes().ct_eq(given.as_bytes()))
    }
}

/// What a stored session allows at `now`.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Over its absolute or idle limit.
    Ended,
    /// Valid; `touch` says its activity should be written.
    Valid { touch: bool },
}

pub fn judge(session: &StoredSession, now: i64) -> Verdict {
    let absolute = session
        .expires_at
        .min(session.created_at.saturating_add(SESSION_SECONDS));
    if now >= absolute || now - session.seen_at >= SESSION_IDLE_SECONDS {
        return Verdict::Ended;
    }
    Verdict::Valid {
        touch: now - session.seen_at >= TOUCH_EVERY_SECONDS,
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

    fn stored(created_at: i64, seen_at: i64) -> StoredSession {
        StoredSession {
            tenant: "acme".into(),
            created_at,
            seen_at,
            expires_at: created_at + SESSION_SECONDS,
        }
    }

    #[test]
    fn ids_are_random_and_round_trip_through_the_cookie() {
        let (a, b) = (SessionId::generate(), SessionId::generate());
        assert_ne!(a.cookie_value(), b.cookie_value());
        let back = SessionId::parse(&a.cookie_value()).unwrap();
        assert_eq!(back.digest(), a.digest());
        assert!(SessionId::parse("acme.1700000000.c2lnbmF0dXJl").is_none());
        assert!(SessionId::parse(&a.cookie_value()[1..]).is_none());
    }

    #[test]
    fn csrf_is_bound_to_the_session() {
        let (a, b) = (SessionId::generate(), SessionId::generate());
        assert!(a.csrf_ok(&a.csrf()));
        assert!(!a.csrf_ok(&b.csrf()));
        assert!(!a.csrf_ok(""));
    }

    #[test]
    fn sessions_end_at_the_absolute_and_the_idle_limit() {
        let s = stored(1000, 1000);
        assert_eq!(judge(&s, 1001), Verdict::Valid { touch: false });
        assert_eq!(judge(&s, 1000 + 60), Verdict::Valid { touch: true });
        assert_eq!(judge(&s, 1000 + SESSION_IDLE_SECONDS), Verdict::Ended);
        // Active all along, it still ends after SESSION_SECONDS.
        let busy = stored(1000, 1000 + SESSION_SECONDS - 1);
        assert_eq!(judge(&busy, 1000 + SESSION_SECONDS), Verdict::Ended);
        // A stored expiry past the cap does not extend it.
        let long = StoredSession {
            expires_at: i64::MAX,
            ..busy
        };
        assert_eq!(judge(&long, 1000 + SESSION_SECONDS), Verdict::Ended);
    }
}
