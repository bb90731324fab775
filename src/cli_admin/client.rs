//! The HTTP side of the admin commands: URLs, the bearer token, Idempotency-Key, and turning
//! the API's `{"error": {...}}` answers into one-line errors.

use std::time::Duration;

use anyhow::{anyhow, Context as _};
use bytes::Bytes;
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use url::Url;

use super::ApiArgs;

pub struct Api {
    base: Url,
    token: String,
    http: reqwest::Client,
}

pub struct Reply {
    pub body: Bytes,
    /// The API answered from a saved Idempotency-Key response: nothing was done again.
    pub replayed: bool,
}

impl Api {
    pub fn new(args: &ApiArgs) -> anyhow::Result<Self> {
        let base = Url::parse(&args.url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .ok_or_else(|| anyhow!("--url {:?} is not an http(s) URL", args.url))?;
        let token = args.token.trim().to_owned();
        if token.is_empty() {
            anyhow::bail!("--token (or HOOKGATE_ADMIN_TOKEN) is empty");
        }
        // Only the connection gets a deadline: a bulk replay of many events legitimately
        // takes a while, and cutting it short would leave the user unsure what happened.
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("hookgate-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("could not set up the HTTP client")?;
        Ok(Self { base, token, http })
    }

    /// The base URL as it may appear in messages: without credentials someone put in it.
    fn shown_base(&self) -> String {
        let mut shown = self.base.clone();
        let _ = shown.set_password(None);
        let _ = shown.set_username("");
        shown.to_string()
    }

    /// `{base}/admin/v1/{segments...}`; each segment is percent-encoded, so an id typed by
    /// the user can never reach another route. A path in `--url` (a reverse-proxy prefix)
    /// is kept.
    fn endpoint(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        url.set_query(None);
        url.set_fragment(None);
        url.path_segments_mut()
            .expect("an http(s) URL has a path")
            .pop_if_empty()
            .extend(["admin", "v1"])
            .extend(segments);
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (k, v)));
        }
        url
    }

    pub async fn get(&self, segments: &[&str], query: &[(&str, String)]) -> anyhow::Result<Reply> {
        self.send(Method::GET, segments, query, None, None).await
    }

    pub async fn post(
        &self,
        segments: &[&str],
        body: Option<Vec<u8>>,
        idempotency_key: &str,
    ) -> anyhow::Result<Reply> {
        self.send(Method::POST, segments, &[], body, Some(idempotency_key))
            .await
    }

    pub async fn send(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<Vec<u8>>,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<Reply> {
        let url = self.endpoint(segments, query);
        let mut request = self.http.request(method, url).bearer_auth(&self.token);
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body);
        }
        let response = request.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        let replayed = response
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true");
        let body = response.bytes().await.map_err(|e| self.transport(e))?;
        if !status.is_success() {
            return Err(api_error(status, &body));
        }
        Ok(Reply { body, replayed })
    }

    fn transport(&self, e: reqwest::Error) -> anyhow::Error {
        let base = self.shown_base();
        // reqwest's own message repeats the full URL; the root cause is what helps.
        let mut root: &dyn std::error::Error = &e;
        while let Some(next) = root.source() {
            root = next;
        }
        if e.is_connect() {
            anyhow!("could not connect to hookgate at {base}: {root} (is it running there? set --url or HOOKGATE_URL)")
        } else if e.is_timeout() {
            anyhow!("hookgate at {base} did not answer in time: {root}")
        } else {
            anyhow!("request to hookgate at {base} failed: {root}")
        }
    }
}

/// `code: message (HTTP status)` from the API's error body, or a hint when the answer is
/// not one (the URL points at something that is not hookgate's admin API).
fn api_error(status: StatusCode, body: &[u8]) -> anyhow::Error {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        error: ErrorDetail,
    }
    #[derive(serde::Deserialize)]
    struct ErrorDetail {
        code: String,
        message: String,
    }
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(b) => anyhow!(
            "{}: {} (HTTP {})",
            super::render::clean(&b.error.code),
            super::render::clean(&b.error.message),
            status.as_u16()
        ),
        Err(_) => anyhow!(
            "unexpected answer HTTP {status} without an admin API error body (does --url point at a hookgate gateway?)"
        ),
    }
}

pub fn parse<T: DeserializeOwned>(body: &[u8]) -> anyhow::Result<T> {
    serde_json::from_slice(body).context("the admin API answered with an unexpected JSON shape")
}

/// The key to send: the user's, or a fresh one. Every POST carries one so that a command
/// repeated after a lost answer (timeout, dropped connection) can be made to act once by
/// passing the printed key back.
pub fn idempotency_key(given: Option<&str>, json: bool) -> anyhow::Result<String> {
    let key = match given {
        Some(k) => k.to_owned(),
        None => {
            let mut bytes = [0u8; 16];
            getrandom::getrandom(&mut bytes)
                .map_err(|e| anyhow!("no randomness from the OS: {e}"))?;
            format!("cli-{}", hex::encode(bytes))
        }
    };
    if key.is_empty() || key.len() > 255 || !key.bytes().all(|b| b.is_ascii_graphic()) {
        anyhow::bail!("--idempotency-key must be 1 to 255 visible ASCII characters");
    }
    // Before the request, so the key is known even if the answer never arrives. Scripts
    // (`--json`) are expected to pass their own key when they care about retrying.
    if !json {
        eprintln!(
            "Idempotency-Key: {key} (to repeat this request safely, pass --idempotency-key {key})"
        );
    }
    Ok(key)
}
