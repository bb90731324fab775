//! A destination's extra request headers (`headers = { Authorization = "env:TOKEN" }`):
//! secret references resolved at load, values kept out of every `Debug` and log line.

use std::collections::BTreeMap;

use super::ConfigError;

fn invalid(key: String, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        problem: problem.into(),
    }
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
pub(super) fn destination_headers(
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
