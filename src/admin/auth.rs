//! Bearer-token authentication: the token's SHA-256 is compared in constant time with every
//! configured digest; the match names the tenant the request acts for.

use std::future::{ready, Ready};

use actix_web::{dev::Payload, web, FromRequest, HttpRequest};
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use std::time::Instant;

use super::error::AdminError;
use crate::config::AdminToken;
use crate::domain::Name;
use crate::http::auth_failures::{retry_after_seconds, Client};
use crate::http::AppState;

/// The tenant an authenticated admin request acts for.
#[derive(Debug, Clone)]
pub struct Tenant(pub Name);

impl Tenant {
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// Which configured token, if any, `presented` is. Every digest is compared, so the time
/// taken does not depend on which one matched or how much of it did.
pub fn authenticate<'a>(tokens: &'a [AdminToken], presented: &str) -> Option<&'a Name> {
    let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
    let mut found = subtle::Choice::from(0);
    let mut index = 0u32;
    for (i, token) in tokens.iter().enumerate() {
        let matches = token.sha256.ct_eq(&digest);
        index = u32::conditional_select(&index, &(i as u32), matches);
        found |= matches;
    }
    bool::from(found).then(|| &tokens[index as usize].tenant)
}

impl FromRequest for Tenant {
    type Error = AdminError;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let Some(state) = req.app_data::<web::Data<AppState>>() else {
            return ready(Err(AdminError::Unauthorized));
        };
        let client = Client::of(req.peer_addr());
        let now = Instant::now();
        if let Err(wait) = state.auth_failures.check(client, now) {
            return ready(Err(AdminError::TooManyAuthFailures {
                retry_after_seconds: retry_after_seconds(wait),
            }));
        }
        let tenant = (|| {
            let header = req.headers().get(actix_web::http::header::AUTHORIZATION)?;
            let token = header.to_str().ok()?.strip_prefix("Bearer ")?.trim();
            if token.is_empty() {
                return None;
            }
            authenticate(&state.config.admin.tokens, token).cloned()
        })();
        if tenant.is_none() {
            state.auth_failures.failed(client, now);
            tracing::warn!(client = %client, surface = "admin", "authentication failed");
        }
        ready(tenant.map(Tenant).ok_or(AdminError::Unauthorized))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(tenant: &str, secret: &str) -> AdminToken {
        AdminToken {
            tenant: Name::parse("tenant", tenant).unwrap(),
            sha256: Sha256::digest(secret.as_bytes()).into(),
        }
    }

    #[test]
    fn finds_the_matching_tenant_only() {
        let tokens = [token("acme", "a-secret"), token("globex", "g-secret")];
        assert_eq!(
            authenticate(&tokens, "g-secret").unwrap().as_str(),
            "globex"
        );
        assert_eq!(authenticate(&tokens, "a-secret").unwrap().as_str(), "acme");
        assert!(authenticate(&tokens, "a-secreT").is_none());
        assert!(authenticate(&tokens, "").is_none());
        assert!(authenticate(&[], "a-secret").is_none());
    }
}
