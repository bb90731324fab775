//! What every theme shares: the set-up (the harness's sources plus a Shopify and a generic
//! HMAC source), independent signers, the assertions that a refused case stored nothing, and
//! raw HTTP/1.1 over TCP. The themes import all of it, with the crates they use, by
//! `use crate::common::*`.

pub(crate) use std::time::{Duration, Instant};

pub(crate) use base64::Engine as _;
pub(crate) use hookgate::config::Settings;
pub(crate) use hookgate::store::StoredEvent;
pub(crate) use hookgate_testkit::both_backends;
pub(crate) use reqwest::Method;
pub(crate) use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
pub(crate) use tokio::net::TcpStream;

pub(crate) use crate::support;
pub(crate) use support::signing::hmac_sha256;
pub(crate) use support::{
    error_code, spawn_app_with, Backend, TestApp, ACME_TOKEN, DEFAULT_TOKEN, GITHUB_SECRET,
    MAX_BODY, SLACK_SECRET, STRIPE_OLD_SECRET, STRIPE_SECRET, SVIX_SECRET,
};

// ---------------------------------------------------------------------------------------
// Set-up: the harness's sources plus a Shopify and a generic HMAC source, so every built-in
// provider is reachable over HTTP.

pub(crate) const SHOPIFY_SECRET: &str = "shpss_hostile_shopify_secret";
pub(crate) const GENERIC_SECRET: &str = "generic-hostile-secret";

pub(crate) fn extra_sources() -> &'static str {
    r#"
[[sources]]
name = "shop"
provider = "shopify"
secrets = ["shpss_hostile_shopify_secret"]
destinations = ["audit"]

[[sources]]
name = "generic"
provider = "hmac-sha256"
secrets = ["generic-hostile-secret"]
destinations = ["audit"]
"#
}

pub(crate) fn settings_with_extra_sources() -> Settings {
    Settings::from_toml_str(&format!("{}{}", support::base_config(), extra_sources()))
        .expect("hostile test config")
}

pub(crate) async fn spawn(backend: Backend) -> TestApp {
    spawn_with(backend, |_| {}).await
}

pub(crate) async fn spawn_with(backend: Backend, adjust: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_with(backend, |settings, url| {
        *settings = settings_with_extra_sources();
        adjust(settings);
        url.to_owned()
    })
    .await
}

// ---------------------------------------------------------------------------------------
// Independent signers taking the timestamp as the exact string that goes on the wire.

pub(crate) fn now() -> i64 {
    support::signing::now()
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Every ASCII digit as its full-width form. Replacing only one digit, say '0', would leave a
/// MAC that happens to have none (1 in 60 for 64 hex characters) valid, and the case accepted.
pub(crate) fn full_width_digits(ascii: &str) -> String {
    let wide: String = ascii
        .chars()
        .map(|c| match c.to_digit(10) {
            Some(d) => char::from_u32('\u{ff10}' as u32 + d).expect("a full-width digit"),
            None => c,
        })
        .collect();
    assert_ne!(wide, ascii, "a 64-character hex MAC with no digit at all");
    wide
}

pub(crate) fn cat(prefix: &str, body: &[u8]) -> Vec<u8> {
    let mut v = prefix.as_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

pub(crate) fn stripe_sig(secret: &str, ts: &str, body: &[u8]) -> String {
    hex::encode(hmac_sha256(
        secret.as_bytes(),
        &cat(&format!("{ts}."), body),
    ))
}

pub(crate) fn github_sig(secret: &str, body: &[u8]) -> String {
    hex::encode(hmac_sha256(secret.as_bytes(), body))
}

pub(crate) fn slack_sig(secret: &str, ts: &str, body: &[u8]) -> String {
    hex::encode(hmac_sha256(
        secret.as_bytes(),
        &cat(&format!("v0:{ts}:"), body),
    ))
}

pub(crate) fn svix_sig(secret: &str, id: &str, ts: &str, body: &[u8]) -> String {
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap();
    b64(&hmac_sha256(&key, &cat(&format!("{id}.{ts}."), body)))
}

pub(crate) fn shopify_sig(secret: &str, body: &[u8]) -> String {
    b64(&hmac_sha256(secret.as_bytes(), body))
}

pub(crate) fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

pub(crate) fn stripe_body(id: &str) -> String {
    format!(r#"{{"id":"{id}","object":"event","type":"invoice.paid","data":{{"amount":42}}}}"#)
}

/// Stripe headers with an exact `Stripe-Signature` value.
pub(crate) fn stripe_with(value: &str) -> Vec<(String, String)> {
    h(&[
        ("Stripe-Signature", value),
        ("Content-Type", "application/json"),
    ])
}

pub(crate) fn stripe_signed(body: &str) -> Vec<(String, String)> {
    let ts = now().to_string();
    stripe_with(&format!(
        "t={ts},v1={}",
        stripe_sig(STRIPE_SECRET, &ts, body.as_bytes())
    ))
}

pub(crate) fn github_with(sig_value: &str, delivery: &str) -> Vec<(String, String)> {
    h(&[
        ("X-Hub-Signature-256", sig_value),
        ("X-GitHub-Delivery", delivery),
        ("X-GitHub-Event", "push"),
    ])
}

pub(crate) fn github_signed(body: &[u8], delivery: &str) -> Vec<(String, String)> {
    github_with(
        &format!("sha256={}", github_sig(GITHUB_SECRET, body)),
        delivery,
    )
}

pub(crate) fn slack_with(sig_value: &str, ts: &str) -> Vec<(String, String)> {
    h(&[
        ("X-Slack-Signature", sig_value),
        ("X-Slack-Request-Timestamp", ts),
        ("Content-Type", "application/json"),
    ])
}

pub(crate) fn slack_signed_at(ts: &str, body: &[u8]) -> Vec<(String, String)> {
    slack_with(&format!("v0={}", slack_sig(SLACK_SECRET, ts, body)), ts)
}

pub(crate) fn svix_with(id: &str, ts: &str, sig_value: &str) -> Vec<(String, String)> {
    h(&[
        ("svix-id", id),
        ("svix-timestamp", ts),
        ("svix-signature", sig_value),
        ("Content-Type", "application/json"),
    ])
}

pub(crate) fn svix_signed_at(id: &str, ts: &str, body: &[u8]) -> Vec<(String, String)> {
    svix_with(
        id,
        ts,
        &format!("v1,{}", svix_sig(SVIX_SECRET, id, ts, body)),
    )
}

pub(crate) fn shopify_with(sig_value: &str, id: &str) -> Vec<(String, String)> {
    h(&[
        ("X-Shopify-Hmac-Sha256", sig_value),
        ("X-Shopify-Webhook-Id", id),
        ("X-Shopify-Topic", "orders/create"),
    ])
}

pub(crate) fn slack_body(event_id: &str) -> String {
    format!(r#"{{"type":"event_callback","event_id":"{event_id}","event":{{"type":"message"}}}}"#)
}

// ---------------------------------------------------------------------------------------
// Assertions: each refused case leaves the store exactly as it was.

pub(crate) async fn store_counts(app: &TestApp) -> (i64, i64) {
    (
        app.store.count_events().await.unwrap(),
        app.store
            .count_jobs(hookgate::queue::JobStatus::Pending)
            .await
            .unwrap(),
    )
}

/// Posts and asserts the exact error answer, and that nothing was stored.
pub(crate) async fn refused(
    app: &TestApp,
    case: &str,
    source: &str,
    headers: &[(String, String)],
    body: impl Into<reqwest::Body>,
    expect: (u16, &str),
) {
    let before = store_counts(app).await;
    let r = app.post_webhook(source, headers, body).await;
    assert_eq!(
        error_code(r).await,
        (expect.0, expect.1.to_owned()),
        "case: {case}"
    );
    assert_eq!(
        store_counts(app).await,
        before,
        "case {case} stored something"
    );
}

/// Posts and asserts a 200 for a new event; returns the stored event.
pub(crate) async fn accepted(
    app: &TestApp,
    case: &str,
    source: &str,
    headers: &[(String, String)],
    body: impl Into<reqwest::Body>,
) -> StoredEvent {
    let before = app.store.count_events().await.unwrap();
    let r = app.post_webhook(source, headers, body).await;
    let status = r.status();
    let json: serde_json::Value = r.json().await.unwrap_or_default();
    assert_eq!(status, 200, "case {case}: {json}");
    assert_eq!(json["duplicate"], false, "case {case}: {json}");
    let id = hookgate::domain::EventId::parse(json["id"].as_str().unwrap()).unwrap();
    assert_eq!(
        app.store.count_events().await.unwrap(),
        before + 1,
        "{case}"
    );
    app.store.get_event(id).await.unwrap().expect("stored")
}

// ---------------------------------------------------------------------------------------
// Raw HTTP/1.1 over TCP, for what reqwest will not send.

#[derive(Debug)]
pub(crate) struct RawResponse {
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) body: Vec<u8>,
    /// Whether the server closed the connection (within a second) after answering.
    pub(crate) closed: bool,
}

impl RawResponse {
    /// A complete response at the start of `bytes` (head, and a body of its Content-Length).
    pub(crate) fn parse(bytes: &[u8], closed: bool) -> Option<Self> {
        let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
        let status = head.split(' ').nth(1)?.parse().ok()?;
        let len: usize = header_value(&head, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let body = bytes.get(end + 4..end + 4 + len)?.to_vec();
        Some(Self {
            status,
            head,
            body,
            closed,
        })
    }

    pub(crate) fn header(&self, name: &str) -> Option<String> {
        header_value(&self.head, name)
    }

    /// `(status, error.code)` of a JSON error answer.
    pub(crate) fn error_code(&self) -> (u16, String) {
        let json: serde_json::Value = serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not a JSON error ({e}): {} {:?}",
                self.head,
                String::from_utf8_lossy(&self.body)
            )
        });
        let code = json["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error.code in {json}"));
        (self.status, code.to_owned())
    }
}

pub(crate) fn header_value(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

pub(crate) fn socket_addr(app: &TestApp) -> String {
    app.address.trim_start_matches("http://").to_owned()
}

/// Writes `bytes` in one go and reads the server's answer: returns once a complete response
/// has arrived and the server has closed the connection, or a second after the response if
/// it keeps it open (`closed` tells which). Panics when no response comes within 10 s.
pub(crate) async fn raw_request(app: &TestApp, bytes: &[u8]) -> RawResponse {
    let mut stream = TcpStream::connect(socket_addr(app)).await.unwrap();
    // The server may answer and close before reading everything: a failed write is fine.
    let _ = stream.write_all(bytes).await;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut complete = false;
    let closed = loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Err(_) => break false,
            // A reset after the answer (unread request bytes) counts as a close.
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
        if !complete && RawResponse::parse(&buf, false).is_some() {
            complete = true;
            deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        }
    };
    RawResponse::parse(&buf, closed).unwrap_or_else(|| {
        panic!(
            "no HTTP response to {:?}: got {:?}",
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(&buf)
        )
    })
}

/// A POST with the given header lines (each without CRLF; the bytes are sent as they are).
pub(crate) fn raw_post(target: &str, header_lines: &[&[u8]], body: &[u8]) -> Vec<u8> {
    let mut out =
        format!("POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n").into_bytes();
    for line in header_lines {
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out
}

pub(crate) fn stripe_signature_line(body: &[u8]) -> Vec<u8> {
    let ts = now().to_string();
    format!(
        "Stripe-Signature: t={ts},v1={}",
        stripe_sig(STRIPE_SECRET, &ts, body)
    )
    .into_bytes()
}
