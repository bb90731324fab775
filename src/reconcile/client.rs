//! Calls to a provider's API, shared by every provider: the credential as a bearer token
//! (a GitHub App's JWT for an App hook; marked sensitive, never in a message), a timeout on each call, a bound on what is read,
//! and rate limits read from `429` + `Retry-After` (and GitHub's exhausted `403`).

use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, RETRY_AFTER};
use reqwest::Method;
use secrecy::ExposeSecret;

use crate::config::{ReconcileConfig, ReconcileProvider};

/// The largest response body read: a page of 100 Stripe events is well under it.
pub(crate) const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// The wait assumed when a provider limits the rate without saying for how long.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ApiError {
    /// The provider asked for no more calls until then.
    #[error("{call}: rate limited by the provider until {until}")]
    RateLimited { call: String, until: DateTime<Utc> },
    #[error("{call}: the provider answered {status}")]
    Status { call: String, status: u16 },
    #[error("{call}: {problem}")]
    Transport { call: String, problem: String },
    #[error("{call}: unexpected response: {problem}")]
    Invalid { call: String, problem: String },
}

impl ApiError {
    pub(crate) fn invalid(call: &str, problem: impl Into<String>) -> Self {
        Self::Invalid {
            call: call.to_owned(),
            problem: problem.into(),
        }
    }
}

/// A successful answer.
#[derive(Debug)]
pub(crate) struct ApiResponse {
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Debug, Clone)]
pub(crate) struct ApiClient {
    http: reqwest::Client,
}

impl ApiClient {
    pub(crate) fn new() -> Self {
        let http = reqwest::Client::builder()
            // A redirect would carry the credential somewhere the configuration did not name.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .expect("the HTTP client builds with static settings");
        Self { http }
    }

    /// `method` on `path_and_query` under the source's API base. `call` names the call in
    /// errors (method and path, never the credential).
    pub(crate) async fn call(
        &self,
        config: &ReconcileConfig,
        method: Method,
        path_and_query: &str,
    ) -> Result<ApiResponse, ApiError> {
        let call = format!(
            "{method} {}",
            path_and_query.split('?').next().unwrap_or("")
        );
        let url = format!("{}{path_and_query}", config.api_base);
        // A GitHub App's calls carry a JWT signed with its private key, never the key.
        let token = match &config.github_app {
            Some(app) => app.jwt(Utc::now().timestamp()),
            None => config.api_key.expose_secret().to_owned(),
        };
        let mut auth =
            HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| ApiError::Transport {
                call: call.clone(),
                problem: "the API key holds characters a header cannot".into(),
            })?;
        auth.set_sensitive(true);
        let mut request = self
            .http
            .request(method, url)
            .timeout(config.timeout)
            .header(AUTHORIZATION, auth);
        request = match config.provider {
            ReconcileProvider::GitHub { .. } => request
                .header(ACCEPT, "application/vnd.github+json")
                .header("X-GitHub-Api-Version", "2022-11-28"),
            _ => request.header(ACCEPT, "application/json"),
        };
        let response = request.send().await.map_err(|e| ApiError::Transport {
            call: call.clone(),
            problem: transport_problem(&e),
        })?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        if let Some(until) = rate_limited(status, &headers, Utc::now()) {
            return Err(ApiError::RateLimited { call, until });
        }
        if !(200..300).contains(&status) {
            return Err(ApiError::Status { call, status });
        }
        let body = read_bounded(response)
            .await
            .map_err(|problem| ApiError::Transport {
                call: call.clone(),
                problem,
            })?;
        Ok(ApiResponse { headers, body })
    }
}

/// The error without its URL: the URL holds only the API base and the listing's cursor, but
/// a message names the call already.
fn transport_problem(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "the call timed out".into()
    } else if e.is_connect() {
        "cannot connect to the provider's API".into()
    } else {
        "the call failed before an answer".into()
    }
}

async fn read_bounded(mut response: reqwest::Response) -> Result<Bytes, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("the answer broke off: {}", transport_problem(&e)))?
    {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(format!("the answer is over {MAX_RESPONSE_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.into())
}

/// When the answer is a rate limit, until when: `429` with `Retry-After` (seconds or an HTTP
/// date), or GitHub's `403` with `x-ratelimit-remaining: 0` and `x-ratelimit-reset`.
pub(crate) fn rate_limited(
    status: u16,
    headers: &HeaderMap,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let retry_after = text(RETRY_AFTER.as_str()).and_then(|v| {
        let v = v.trim();
        match v.parse::<u64>() {
            Ok(secs) => Some(now + chrono::TimeDelta::seconds(secs.min(86_400) as i64)),
            Err(_) => DateTime::parse_from_rfc2822(v)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
        }
    });
    let exhausted = status == 403 && text("x-ratelimit-remaining") == Some("0");
    if status != 429 && !exhausted {
        return None;
    }
    let reset = text("x-ratelimit-reset")
        .and_then(|v| v.trim().parse::<i64>().ok())
        .and_then(|s| DateTime::from_timestamp(s, 0));
    Some(
        retry_after
            .or(reset)
            .unwrap_or(now + chrono::TimeDelta::from_std(DEFAULT_RETRY_AFTER).unwrap_or_default()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn reads_retry_after_in_seconds_or_as_a_date_and_githubs_reset() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let at = |s: i64| Some(now + chrono::TimeDelta::seconds(s));
        assert_eq!(
            rate_limited(429, &headers(&[("retry-after", "30")]), now),
            at(30)
        );
        assert_eq!(
            rate_limited(
                429,
                &headers(&[("retry-after", "Tue, 14 Nov 2023 22:14:20 GMT")]),
                now
            ),
            DateTime::from_timestamp(1_700_000_060, 0)
        );
        assert_eq!(rate_limited(429, &HeaderMap::new(), now), at(60));
        let github = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000100"),
        ]);
        assert_eq!(rate_limited(403, &github, now), at(100));
        assert_eq!(rate_limited(403, &HeaderMap::new(), now), None);
        assert_eq!(
            rate_limited(500, &headers(&[("retry-after", "5")]), now),
            None
        );
    }
}
