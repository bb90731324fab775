//! A source's verifier: its provider definition with the source's overrides applied, its
//! secrets or public keys, and what else the source says (`public_url`, `verify_token`, a
//! test `signing_key`).

use secrecy::SecretSlice;

use super::definition::{ProviderDefinition, ResponseSpec};
use super::keys::{SigningKey, VerifyKey};

/// A provider definition with a source's overrides applied, and that source's keys.
#[derive(Debug)]
pub struct SourceVerifier {
    pub(super) definition: ProviderDefinition,
    pub(super) keys: Vec<VerifyKey>,
    public_url: Option<String>,
    pub(super) verify_token: Option<SecretSlice<u8>>,
    signing_key: Option<SigningKey>,
}

impl SourceVerifier {
    /// `secrets` in order of preference; the error gives the index of a secret that is
    /// unusable. For asymmetric providers the "secrets" are public keys; a definition that
    /// takes both (Standard Webhooks) tells them apart by the public key's prefix.
    pub fn new(
        definition: ProviderDefinition,
        secrets: &[&str],
    ) -> Result<Self, (usize, &'static str)> {
        let asymmetric = definition.asymmetric_algorithm();
        let takes_secrets = definition.takes_secrets();
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let key = match (asymmetric, &definition.public_key) {
                    (Some(alg), Some(pk))
                        if !takes_secrets
                            || (!pk.strip_prefix.is_empty() && s.starts_with(&pk.strip_prefix)) =>
                    {
                        VerifyKey::public(pk, alg, s)
                    }
                    _ => VerifyKey::secret(&definition.secret, s),
                };
                key.map_err(|e| (i, e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err((0, "list is empty"));
        }
        Ok(Self {
            definition,
            keys,
            public_url: None,
            verify_token: None,
            signing_key: None,
        })
    }

    /// The URL the provider calls, as it calls it (behind a proxy, not the one hookgate
    /// sees): `https://host[:port]/path`, no query.
    pub fn with_public_url(mut self, url: &str) -> Result<Self, &'static str> {
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
            .ok_or("must start with https:// or http://")?;
        if rest.is_empty() || rest.starts_with('/') || url.contains(['?', '#']) {
            return Err("must be an absolute URL with a host and no query or fragment");
        }
        self.public_url = Some(url.to_owned());
        Ok(self)
    }

    pub fn with_verify_token(mut self, token: &str) -> Self {
        self.verify_token = Some(token.as_bytes().to_vec().into());
        self
    }

    /// A private key `hookgate send` signs test events with (asymmetric providers only).
    pub fn with_signing_key(mut self, key: &str) -> Result<Self, &'static str> {
        let (Some(alg), Some(spec)) = (
            self.definition.asymmetric_algorithm(),
            &self.definition.public_key,
        ) else {
            return Err("applies only to providers with public-key signatures");
        };
        self.signing_key = Some(SigningKey::parse(spec, alg, key)?);
        Ok(self)
    }

    pub fn provider_name(&self) -> &str {
        &self.definition.name
    }

    pub fn definition(&self) -> &ProviderDefinition {
        &self.definition
    }

    /// The answer to an accepted event, when the provider needs a particular one.
    pub fn response(&self) -> Option<&ResponseSpec> {
        self.definition.response.as_ref()
    }

    /// How many secrets or public keys are live.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    pub fn public_url(&self) -> Option<&str> {
        self.public_url.as_deref()
    }

    pub(super) fn keys(&self) -> &[VerifyKey] {
        &self.keys
    }

    pub(super) fn signing_key(&self) -> Option<&SigningKey> {
        self.signing_key.as_ref()
    }

    /// `{url}` as the provider may have signed it: the public URL with the request's query,
    /// and the same with the scheme's default port added or removed (Twilio's libraries
    /// accept either, as proxies differ in what they pass on).
    pub(super) fn signed_urls(&self, query: &str) -> Vec<String> {
        let Some(base) = &self.public_url else {
            return Vec::new();
        };
        let with_query = |b: &str| match query {
            "" => b.to_owned(),
            q => format!("{b}?{q}"),
        };
        let mut urls = vec![with_query(base)];
        let (scheme, port) = if base.starts_with("https://") {
            ("https://", ":443")
        } else {
            ("http://", ":80")
        };
        let rest = &base[scheme.len()..];
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let host_end = authority.rfind(']').unwrap_or(0);
        let other = if let Some(host) = authority.strip_suffix(port) {
            format!("{scheme}{host}{path}")
        } else if !authority[host_end..].contains(':') {
            format!("{scheme}{authority}{port}{path}")
        } else {
            return urls;
        };
        urls.push(with_query(&other));
        urls
    }
}
