//! One `[[destinations]]` table as the gateway uses it: its URL, signing key, retry policy and
//! limits, its extra request headers (secret references resolved at load, values kept out of
//! every `Debug` and log line) and its circuit breaker.

use std::collections::BTreeMap;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretSlice};

use super::broker::{redacted, refuse_keys, NatsTarget, RabbitTarget};
use super::secret::resolve_secret;
use super::settings::DestinationSettings;
use super::validate::{duration, invalid};
use super::ConfigError;
use crate::domain::Name;
use crate::queue::RetryPolicy;

pub struct Destination {
    pub name: Name,
    /// Where deliveries go: an HTTP receiver or a broker.
    pub target: Target,
    /// The decoded `whsec_` key that signs forwarded deliveries: always set for HTTP,
    /// optional for a broker (its messages then carry the same `webhook-*` headers).
    pub signing_key: Option<SecretSlice<u8>>,
    pub retry_policy: RetryPolicy,
    pub timeout: Duration,
    pub max_in_flight: usize,
    pub circuit: Option<Circuit>,
    /// Deliveries per second over every process on the database.
    pub rate_limit: Option<RateLimit>,
}

/// A destination's kind, with what that kind needs.
pub enum Target {
    Http {
        url: url::Url,
        /// `headers`, resolved: sent with every delivery, values marked sensitive (never in
        /// `Debug`, so never in a log line).
        headers: reqwest::header::HeaderMap,
    },
    Nats(NatsTarget),
    RabbitMq(RabbitTarget),
}

impl Target {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Http { .. } => "http",
            Self::Nats(_) => "nats",
            Self::RabbitMq(_) => "rabbitmq",
        }
    }

    /// Where deliveries go, without credentials: for logs, `Debug` and the console.
    pub fn location(&self) -> String {
        match self {
            Self::Http { url, .. } => {
                let mut shown = url.clone();
                let _ = shown.set_password(None);
                let _ = shown.set_username("");
                shown.to_string()
            }
            Self::Nats(n) => redacted(&n.url),
            Self::RabbitMq(r) => redacted(&r.url),
        }
    }

    pub fn is_broker(&self) -> bool {
        !matches!(self, Self::Http { .. })
    }
}

/// A destination's delivery rate limit: a token bucket kept in the database, so every
/// process on it draws from the same one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Tokens (deliveries) added per second.
    pub per_second: f64,
    /// The most tokens the bucket holds: a tenth of a second's worth, at least one, so the
    /// rate is smooth rather than a burst at the start of each second.
    pub burst: f64,
}

impl RateLimit {
    /// `"50/s"`, `"3000/min"` or `"100000/h"`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let problem = || format!("is {text:?}, not a rate like \"50/s\" or \"3000/min\"");
        let (count, unit) = text.split_once('/').ok_or_else(problem)?;
        let count: f64 = count.trim().parse().map_err(|_| problem())?;
        let seconds = match unit.trim() {
            "s" | "sec" | "second" => 1.0,
            "m" | "min" | "minute" => 60.0,
            "h" | "hour" => 3600.0,
            _ => return Err(problem()),
        };
        if !(count.is_finite() && count > 0.0) {
            return Err("must be a positive rate".into());
        }
        let per_second = count / seconds;
        Ok(Self {
            per_second,
            burst: (per_second / 10.0).max(1.0),
        })
    }
}

/// A destination's circuit breaker: trips after `failures` failed attempts in a row, then
/// probes once per `cool_down` until an attempt succeeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Circuit {
    pub failures: u32,
    pub cool_down: Duration,
}

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Destination")
            .field("name", &self.name)
            .field("kind", &self.target.kind())
            .field("location", &self.target.location())
            .field("retry_policy", &self.retry_policy)
            .finish_non_exhaustive()
    }
}

/// `destinations[i]`, every value checked; errors name the key.
pub(super) fn destination(
    i: usize,
    dest: &DestinationSettings,
) -> Result<Destination, ConfigError> {
    let key = |k: &str| format!("destinations[{i}].{k}");
    let name = Name::parse("destination name", &dest.name)
        .map_err(|e| invalid(key("name"), e.to_string()))?;
    let target = match dest.kind.as_str() {
        "http" => {
            refuse_keys(
                &key,
                dest,
                "http",
                &["subject", "stream", "exchange", "routing_key"],
            )?;
            let url = url::Url::parse(&dest.url)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https"))
                .ok_or_else(|| invalid(key("url"), "must be an http:// or https:// URL"))?;
            Target::Http {
                url,
                headers: destination_headers(i, &dest.headers)?,
            }
        }
        "nats" => Target::Nats(super::broker::nats(&key, dest)?),
        "rabbitmq" => Target::RabbitMq(super::broker::rabbitmq(&key, dest)?),
        other => {
            return Err(invalid(
                key("kind"),
                format!("is {other:?}; a destination is \"http\", \"nats\" or \"rabbitmq\""),
            ))
        }
    };
    let signing_key = match &dest.signing_secret {
        None if target.is_broker() => None,
        None => {
            return Err(invalid(
                key("signing_secret"),
                "is required for an HTTP destination (generate one with `openssl rand -base64 32` and prefix it with \"whsec_\")",
            ))
        }
        Some(reference) => Some(signing_key(&key, reference)?),
    };
    if dest.retry_schedule.is_empty() {
        return Err(invalid(key("retry_schedule"), "is empty"));
    }
    let retry_schedule = dest
        .retry_schedule
        .iter()
        .enumerate()
        .map(|(j, v)| duration(&format!("destinations[{i}].retry_schedule[{j}]"), v))
        .collect::<Result<Vec<_>, _>>()?;
    let timeout = duration(&key("timeout"), &dest.timeout)?;
    if timeout.is_zero() {
        return Err(invalid(key("timeout"), "must be positive"));
    }
    if dest.max_in_flight == 0 {
        return Err(invalid(key("max_in_flight"), "must be positive"));
    }
    let circuit = match &dest.circuit {
        None => None,
        Some(c) => {
            if c.failures == 0 {
                return Err(invalid(key("circuit.failures"), "must be positive"));
            }
            let cool_down = duration(&key("circuit.cool_down"), &c.cool_down)?;
            if cool_down < Duration::from_secs(1) {
                return Err(invalid(key("circuit.cool_down"), "must be at least 1s"));
            }
            Some(Circuit {
                failures: c.failures,
                cool_down,
            })
        }
    };
    let rate_limit = dest
        .rate_limit
        .as_deref()
        .map(RateLimit::parse)
        .transpose()
        .map_err(|p| invalid(key("rate_limit"), p))?;
    Ok(Destination {
        name,
        target,
        signing_key,
        retry_policy: RetryPolicy::new(retry_schedule),
        timeout,
        max_in_flight: dest.max_in_flight,
        circuit,
        rate_limit,
    })
}

/// A `whsec_` secret reference, resolved and decoded.
fn signing_key(
    key: &dyn Fn(&str) -> String,
    reference: &secrecy::SecretString,
) -> Result<SecretSlice<u8>, ConfigError> {
    let secret = resolve_secret(reference).map_err(|p| invalid(key("signing_secret"), p))?;
    let decoded = secret
        .expose_secret()
        .strip_prefix("whsec_")
        .and_then(|b| crate::verify::decode_base64_lenient(b).ok())
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            invalid(
                key("signing_secret"),
                "must be \"whsec_\" followed by base64 (generate one with `openssl rand -base64 32`)",
            )
        })?;
    Ok(decoded.into())
}

/// Headers hookgate sets on a delivery itself: a destination's `headers` may not replace
/// them (the signature, what the body is, the connection's framing).
const RESERVED_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "host",
];

/// `destinations[i].headers`: each name a valid header name that is not hookgate's own
/// (`webhook-*`, `hookgate-*`, framing), each value a resolved secret reference.
fn destination_headers(
    i: usize,
    configured: &BTreeMap<String, secrecy::SecretString>,
) -> Result<reqwest::header::HeaderMap, ConfigError> {
    use reqwest::header::{HeaderName, HeaderValue};
    use secrecy::ExposeSecret;
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, reference) in configured {
        let key = format!("destinations[{i}].headers.{name}");
        let parsed = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| invalid(key.clone(), "is not a valid header name"))?;
        let lower = parsed.as_str();
        if RESERVED_HEADERS.contains(&lower)
            || lower.starts_with("webhook-")
            || lower.starts_with("hookgate-")
        {
            return Err(invalid(
                key,
                "is a header hookgate sets on every delivery itself",
            ));
        }
        let value =
            super::secret::resolve_secret(reference).map_err(|p| invalid(key.clone(), p))?;
        let mut value = HeaderValue::from_str(value.expose_secret())
            .map_err(|_| invalid(key, "is not a valid header value (control characters?)"))?;
        value.set_sensitive(true);
        headers.insert(parsed, value);
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use secrecy::SecretString;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Result<reqwest::header::HeaderMap, String> {
        let configured: BTreeMap<String, SecretString> = pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), SecretString::from((*v).to_owned())))
            .collect();
        destination_headers(2, &configured).map_err(|e| e.to_string())
    }

    #[test]
    fn values_resolve_and_never_show_in_debug() {
        let h = headers(&[("Authorization", "Bearer t0ken-value")]).unwrap();
        assert_eq!(h["authorization"], "Bearer t0ken-value");
        assert!(h["authorization"].is_sensitive());
        assert!(!format!("{h:?}").contains("t0ken"));
    }

    #[test]
    fn hookgate_s_own_headers_and_bad_names_are_refused_naming_the_key() {
        for (name, value, expected) in [
            (
                "Webhook-Signature",
                "x",
                "`destinations[2].headers.Webhook-Signature` is a header hookgate sets",
            ),
            (
                "hookgate-source",
                "x",
                "`destinations[2].headers.hookgate-source` is a header hookgate sets",
            ),
            (
                "Content-Type",
                "x",
                "`destinations[2].headers.Content-Type` is a header hookgate sets",
            ),
            (
                "bad name",
                "x",
                "`destinations[2].headers.bad name` is not a valid header name",
            ),
            (
                "X-A",
                "env:HOOKGATE_TEST_UNSET_VARIABLE",
                "`destinations[2].headers.X-A` names environment variable",
            ),
            (
                "X-B",
                "a\u{1}b",
                "`destinations[2].headers.X-B` is not a valid header value",
            ),
        ] {
            let err = headers(&[(name, value)]).unwrap_err();
            assert!(err.contains(expected), "{name}: {err}");
            assert!(!err.contains("a\u{1}b"));
        }
    }
}
