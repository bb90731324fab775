//! Hostile input: bad requests, each with its exact answer, and the store checked to hold
//! nothing except where a case is accepted by design (each such case says why).
//!
//! Every test runs once on SQLite and once on PostgreSQL (see `both_backends!`). Requests an
//! HTTP client library refuses to send (CR/LF in values, smuggling framings, slow clients)
//! are written byte for byte on a raw `TcpStream`.

use hookgate_testkit as support;
use hookgate_testkit::both_backends;

use std::time::{Duration, Instant};

use base64::Engine as _;
use hookgate::config::Settings;
use hookgate::store::StoredEvent;
use reqwest::Method;
use support::signing::hmac_sha256;
use support::{
    error_code, spawn_app_with, Backend, TestApp, ACME_TOKEN, DEFAULT_TOKEN, GITHUB_SECRET,
    MAX_BODY, SLACK_SECRET, STRIPE_OLD_SECRET, STRIPE_SECRET, SVIX_SECRET,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

both_backends!(
    tampered_bodies_and_headers_are_refused,
    signature_encodings_whitespace_and_case,
    empty_values_are_refused,
    duplicate_and_repeated_headers,
    timestamps_far_past_far_future_and_non_numeric,
    bodies_over_the_limit_with_content_length_or_chunked,
    invalid_utf8_deep_json_and_duplicate_id_keys,
    unknown_sources_and_path_traversal,
    header_injection_and_malformed_http,
    slowloris_request_head_is_cut_off_by_the_request_timeout,
    slow_second_request_head_on_a_kept_alive_connection,
    slow_body_after_a_complete_head,
    slow_chunked_body_is_answered_and_closed,
    admin_tokens_missing_foreign_or_one_byte_off,
);

// ---------------------------------------------------------------------------------------
// Set-up: the harness's sources plus a Shopify and a generic HMAC source, so every built-in
// provider is reachable over HTTP.

const SHOPIFY_SECRET: &str = "shpss_hostile_shopify_secret";
const GENERIC_SECRET: &str = "generic-hostile-secret";

fn extra_sources() -> &'static str {
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

fn settings_with_extra_sources() -> Settings {
    Settings::from_toml_str(&format!("{}{}", support::base_config(), extra_sources()))
        .expect("hostile test config")
}

async fn spawn(backend: Backend) -> TestApp {
    spawn_with(backend, |_| {}).await
}

async fn spawn_with(backend: Backend, adjust: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_with(backend, |settings, url| {
        *settings = settings_with_extra_sources();
        adjust(settings);
        url.to_owned()
    })
    .await
}

// ---------------------------------------------------------------------------------------
// Independent signers taking the timestamp as the exact string that goes on the wire.

fn now() -> i64 {
    support::signing::now()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Every ASCII digit as its full-width form. Replacing only one digit, say '0', would leave a
/// MAC that happens to have none (1 in 60 for 64 hex characters) valid, and the case accepted.
fn full_width_digits(ascii: &str) -> String {
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

fn cat(prefix: &str, body: &[u8]) -> Vec<u8> {
    let mut v = prefix.as_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

fn stripe_sig(secret: &str, ts: &str, body: &[u8]) -> String {
    hex::encode(hmac_sha256(
        secret.as_bytes(),
        &cat(&format!("{ts}."), body),
    ))
}

fn github_sig(secret: &str, body: &[u8]) -> String {
    hex::encode(hmac_sha256(secret.as_bytes(), body))
}

fn slack_sig(secret: &str, ts: &str, body: &[u8]) -> String {
    hex::encode(hmac_sha256(
        secret.as_bytes(),
        &cat(&format!("v0:{ts}:"), body),
    ))
}

fn svix_sig(secret: &str, id: &str, ts: &str, body: &[u8]) -> String {
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap();
    b64(&hmac_sha256(&key, &cat(&format!("{id}.{ts}."), body)))
}

fn shopify_sig(secret: &str, body: &[u8]) -> String {
    b64(&hmac_sha256(secret.as_bytes(), body))
}

fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

fn stripe_body(id: &str) -> String {
    format!(r#"{{"id":"{id}","object":"event","type":"invoice.paid","data":{{"amount":42}}}}"#)
}

/// Stripe headers with an exact `Stripe-Signature` value.
fn stripe_with(value: &str) -> Vec<(String, String)> {
    h(&[
        ("Stripe-Signature", value),
        ("Content-Type", "application/json"),
    ])
}

fn stripe_signed(body: &str) -> Vec<(String, String)> {
    let ts = now().to_string();
    stripe_with(&format!(
        "t={ts},v1={}",
        stripe_sig(STRIPE_SECRET, &ts, body.as_bytes())
    ))
}

fn github_with(sig_value: &str, delivery: &str) -> Vec<(String, String)> {
    h(&[
        ("X-Hub-Signature-256", sig_value),
        ("X-GitHub-Delivery", delivery),
        ("X-GitHub-Event", "push"),
    ])
}

fn github_signed(body: &[u8], delivery: &str) -> Vec<(String, String)> {
    github_with(
        &format!("sha256={}", github_sig(GITHUB_SECRET, body)),
        delivery,
    )
}

fn slack_with(sig_value: &str, ts: &str) -> Vec<(String, String)> {
    h(&[
        ("X-Slack-Signature", sig_value),
        ("X-Slack-Request-Timestamp", ts),
        ("Content-Type", "application/json"),
    ])
}

fn slack_signed_at(ts: &str, body: &[u8]) -> Vec<(String, String)> {
    slack_with(&format!("v0={}", slack_sig(SLACK_SECRET, ts, body)), ts)
}

fn svix_with(id: &str, ts: &str, sig_value: &str) -> Vec<(String, String)> {
    h(&[
        ("svix-id", id),
        ("svix-timestamp", ts),
        ("svix-signature", sig_value),
        ("Content-Type", "application/json"),
    ])
}

fn svix_signed_at(id: &str, ts: &str, body: &[u8]) -> Vec<(String, String)> {
    svix_with(
        id,
        ts,
        &format!("v1,{}", svix_sig(SVIX_SECRET, id, ts, body)),
    )
}

fn shopify_with(sig_value: &str, id: &str) -> Vec<(String, String)> {
    h(&[
        ("X-Shopify-Hmac-Sha256", sig_value),
        ("X-Shopify-Webhook-Id", id),
        ("X-Shopify-Topic", "orders/create"),
    ])
}

fn slack_body(event_id: &str) -> String {
    format!(r#"{{"type":"event_callback","event_id":"{event_id}","event":{{"type":"message"}}}}"#)
}

// ---------------------------------------------------------------------------------------
// Assertions: each refused case leaves the store exactly as it was.

async fn store_counts(app: &TestApp) -> (i64, i64) {
    (
        app.store.count_events().await.unwrap(),
        app.store
            .count_jobs(hookgate::queue::JobStatus::Pending)
            .await
            .unwrap(),
    )
}

/// Posts and asserts the exact error answer, and that nothing was stored.
async fn refused(
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
async fn accepted(
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
struct RawResponse {
    status: u16,
    head: String,
    body: Vec<u8>,
    /// Whether the server closed the connection (within a second) after answering.
    closed: bool,
}

impl RawResponse {
    /// A complete response at the start of `bytes` (head, and a body of its Content-Length).
    fn parse(bytes: &[u8], closed: bool) -> Option<Self> {
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

    fn header(&self, name: &str) -> Option<String> {
        header_value(&self.head, name)
    }

    /// `(status, error.code)` of a JSON error answer.
    fn error_code(&self) -> (u16, String) {
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

fn header_value(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

fn socket_addr(app: &TestApp) -> String {
    app.address.trim_start_matches("http://").to_owned()
}

/// Writes `bytes` in one go and reads the server's answer: returns once a complete response
/// has arrived and the server has closed the connection, or a second after the response if
/// it keeps it open (`closed` tells which). Panics when no response comes within 10 s.
async fn raw_request(app: &TestApp, bytes: &[u8]) -> RawResponse {
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
fn raw_post(target: &str, header_lines: &[&[u8]], body: &[u8]) -> Vec<u8> {
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

fn stripe_signature_line(body: &[u8]) -> Vec<u8> {
    let ts = now().to_string();
    format!(
        "Stripe-Signature: t={ts},v1={}",
        stripe_sig(STRIPE_SECRET, &ts, body)
    )
    .into_bytes()
}

// =======================================================================================
// Tampered bodies and headers.

async fn tampered_bodies_and_headers_are_refused(backend: Backend) {
    let app = spawn(backend).await;
    let invalid = (401, "invalid_signature");
    let ts = now().to_string();

    // Stripe: a body changed after signing, by one byte or by a trailing newline.
    let body = stripe_body("evt_tamper");
    let signed = stripe_signed(&body);
    let cases = [
        ("stripe body one byte changed", body.replace("42", "43")),
        ("stripe body with a trailing newline", format!("{body}\n")),
        ("stripe body truncated", body[..body.len() - 1].to_owned()),
        (
            "stripe body with whitespace re-formatting",
            body.replace(',', ", "),
        ),
    ];
    for (case, tampered) in cases {
        refused(&app, case, "stripe", &signed, tampered, invalid).await;
    }
    // Stripe: the timestamp moved by one second (the MAC covers it).
    let later = (now() + 1).to_string();
    let sig = stripe_sig(STRIPE_SECRET, &ts, body.as_bytes());
    let moved = stripe_with(&format!("t={later},v1={sig}"));
    refused(
        &app,
        "stripe t moved by 1 s",
        "stripe",
        &moved,
        body.clone(),
        invalid,
    )
    .await;
    // Stripe: signed with another source's secret, or with a secret differing in one byte.
    let other = stripe_with(&format!(
        "t={ts},v1={}",
        stripe_sig(GITHUB_SECRET, &ts, body.as_bytes())
    ));
    refused(
        &app,
        "stripe other secret",
        "stripe",
        &other,
        body.clone(),
        invalid,
    )
    .await;
    let near = STRIPE_SECRET.replace("current", "currenT");
    let near = stripe_with(&format!(
        "t={ts},v1={}",
        stripe_sig(&near, &ts, body.as_bytes())
    ));
    refused(
        &app,
        "stripe near secret",
        "stripe",
        &near,
        body.clone(),
        invalid,
    )
    .await;

    // GitHub: body changed.
    let gh_body = br#"{"ref":"refs/heads/main"}"#.to_vec();
    let headers = github_signed(&gh_body, "gh-tamper-1");
    let mut tampered = gh_body.clone();
    tampered[3] ^= 0x20;
    refused(
        &app,
        "github body changed",
        "github",
        &headers,
        tampered,
        invalid,
    )
    .await;
    // GitHub's legacy SHA-1 header alone is not accepted: there is no X-Hub-Signature-256.
    let sha1_only = h(&[
        (
            "X-Hub-Signature",
            "sha1=0000000000000000000000000000000000000000",
        ),
        ("X-GitHub-Delivery", "gh-sha1"),
    ]);
    refused(
        &app,
        "github sha1 header only",
        "github",
        &sha1_only,
        gh_body.clone(),
        (401, "missing_signature"),
    )
    .await;

    // Slack: the timestamp header changed (it is part of the signed string).
    let sl_body = slack_body("EvTamper");
    let mut headers = slack_signed_at(&ts, sl_body.as_bytes());
    headers[1].1 = later.clone();
    refused(
        &app,
        "slack timestamp changed",
        "slack",
        &headers,
        sl_body,
        invalid,
    )
    .await;

    // Svix: the id and the timestamp are signed; swapping either is refused, so a captured
    // request cannot be re-sent under another id to dodge deduplication.
    let sv_body = r#"{"type":"user.created"}"#;
    let mut headers = svix_signed_at("msg_tamper", &ts, sv_body.as_bytes());
    headers[0].1 = "msg_tamper_2".into();
    refused(&app, "svix id swapped", "svix", &headers, sv_body, invalid).await;
    let mut headers = svix_signed_at("msg_tamper", &ts, sv_body.as_bytes());
    headers[1].1 = later.clone();
    refused(
        &app,
        "svix timestamp changed",
        "svix",
        &headers,
        sv_body,
        invalid,
    )
    .await;
    let headers = svix_signed_at("msg_tamper", &ts, sv_body.as_bytes());
    refused(
        &app,
        "svix body changed",
        "svix",
        &headers,
        r#"{"type":"user.deleted"}"#,
        invalid,
    )
    .await;

    // Shopify and the generic HMAC provider: body changed.
    let sh_body = br#"{"id":1}"#.to_vec();
    let headers = shopify_with(&shopify_sig(SHOPIFY_SECRET, &sh_body), "shop-tamper");
    refused(
        &app,
        "shopify body changed",
        "shop",
        &headers,
        br#"{"id":2}"#.to_vec(),
        invalid,
    )
    .await;
    let headers = h(&[("X-Signature", &github_sig(GENERIC_SECRET, &sh_body))]);
    refused(
        &app,
        "generic body changed",
        "generic",
        &headers,
        br#"{"id":2}"#.to_vec(),
        invalid,
    )
    .await;

    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Accepted by design: GitHub signs only the body, so its unsigned headers (delivery id,
    // event name) can be changed by whoever holds a signed body: GitHub's scheme has no
    // timestamp and no signed id. The event is stored as sent, under the new delivery id.
    let mut headers = github_signed(&gh_body, "gh-original");
    headers[1].1 = "gh-replayed-under-new-id".into();
    headers[2].1 = "deployment".into();
    let event = accepted(
        &app,
        "github unsigned headers changed",
        "github",
        &headers,
        gh_body.clone(),
    )
    .await;
    assert_eq!(event.provider_event_id, "gh-replayed-under-new-id");
    assert_eq!(event.event_type.as_deref(), Some("deployment"));
    assert_eq!(event.body, gh_body);
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

// =======================================================================================
// Signature encodings, whitespace and case.

async fn signature_encodings_whitespace_and_case(backend: Backend) {
    let app = spawn(backend).await;
    let invalid = (401, "invalid_signature");
    let ts = now().to_string();

    let body = stripe_body("evt_enc");
    let mac = hmac_sha256(
        STRIPE_SECRET.as_bytes(),
        &cat(&format!("{ts}."), body.as_bytes()),
    );
    let hex_sig = hex::encode(&mac);
    let refusals = [
        ("stripe v1 in base64", format!("t={ts},v1={}", b64(&mac))),
        ("stripe v1 with 0x prefix", format!("t={ts},v1=0x{hex_sig}")),
        (
            "stripe v1 odd-length hex",
            format!("t={ts},v1={}", &hex_sig[1..]),
        ),
        (
            "stripe v1 truncated to 16 bytes",
            format!("t={ts},v1={}", &hex_sig[..32]),
        ),
        (
            "stripe v1 with an extra byte",
            format!("t={ts},v1={hex_sig}00"),
        ),
        (
            "stripe v1 with a space after =",
            format!("t={ts},v1= {hex_sig}"),
        ),
        (
            "stripe v1 with a space before =",
            format!("t={ts},v1 ={hex_sig}"),
        ),
        ("stripe key in upper case", format!("t={ts},V1={hex_sig}")),
        ("stripe t key in upper case", format!("T={ts},v1={hex_sig}")),
        ("stripe ; as pair separator", format!("t={ts};v1={hex_sig}")),
        ("stripe : as kv separator", format!("t={ts},v1:{hex_sig}")),
        ("stripe v0 only", format!("t={ts},v0={hex_sig}")),
        ("stripe signature only, no t", format!("v1={hex_sig}")),
        (
            "stripe hex with a tab inside",
            format!("t={ts},v1={}\t{}", &hex_sig[..10], &hex_sig[10..]),
        ),
        (
            "stripe hex in full-width digits",
            format!("t={ts},v1={}", full_width_digits(&hex_sig)),
        ),
    ];
    for (case, value) in refusals {
        refused(
            &app,
            case,
            "stripe",
            &stripe_with(&value),
            body.clone(),
            invalid,
        )
        .await;
    }

    // Accepted by design (each stores one event; the ids differ so none is a duplicate):
    // upper-case hex is decoded before the constant-time compare, so it is the same MAC.
    let b = stripe_body("evt_upper_hex");
    let sig = stripe_sig(STRIPE_SECRET, &ts, b.as_bytes()).to_uppercase();
    accepted(
        &app,
        "stripe upper-case hex",
        "stripe",
        &stripe_with(&format!("t={ts},v1={sig}")),
        b,
    )
    .await;
    // Pairs are trimmed: spaces around the `,` separator are allowed (the MAC is unchanged).
    let b = stripe_body("evt_spaced_pairs");
    let sig = stripe_sig(STRIPE_SECRET, &ts, b.as_bytes());
    accepted(
        &app,
        "stripe spaces after commas",
        "stripe",
        &stripe_with(&format!("t={ts} ,  v1={sig} ")),
        b,
    )
    .await;
    // Leading/trailing whitespace of the whole value is not part of it in HTTP (OWS).
    let b = stripe_body("evt_ows");
    let sig = stripe_sig(STRIPE_SECRET, &ts, b.as_bytes());
    accepted(
        &app,
        "stripe value with surrounding spaces",
        "stripe",
        &stripe_with(&format!("   t={ts},v1={sig}\t")),
        b,
    )
    .await;
    // Rotation: one bad and one good `v1` verify through the good one.
    let b = stripe_body("evt_one_bad_one_good");
    let sig = stripe_sig(STRIPE_SECRET, &ts, b.as_bytes());
    let bad = "ab".repeat(32);
    accepted(
        &app,
        "stripe bad v1 then good v1",
        "stripe",
        &stripe_with(&format!("t={ts},v1={bad},v1={sig}")),
        b,
    )
    .await;
    // Rotation: a v1 made with the old secret; the event records secret index 1.
    let b = stripe_body("evt_old_secret_v1");
    let sig = stripe_sig(STRIPE_OLD_SECRET, &ts, b.as_bytes());
    let event = accepted(
        &app,
        "stripe old secret",
        "stripe",
        &stripe_with(&format!("t={ts},v1=zz,v1={sig}")),
        b,
    )
    .await;
    assert_eq!(event.verified_secret_index, 1);
    let mut stored = 5;
    assert_eq!(app.store.count_events().await.unwrap(), stored);

    // GitHub: the prefix is exact, the encoding hex.
    let gh_body = br#"{"zen":"Keep it logically awesome."}"#.to_vec();
    let gh_mac = hmac_sha256(GITHUB_SECRET.as_bytes(), &gh_body);
    let gh_hex = hex::encode(&gh_mac);
    let refusals = [
        (
            "github base64 signature",
            format!("sha256={}", b64(&gh_mac)),
        ),
        ("github prefix in upper case", format!("SHA256={gh_hex}")),
        ("github no prefix", gh_hex.clone()),
        ("github sha1= prefix", format!("sha1={gh_hex}")),
        ("github space inside prefix", format!("sha256 ={gh_hex}")),
        ("github space after prefix", format!("sha256= {gh_hex}")),
        ("github doubled prefix", format!("sha256=sha256={gh_hex}")),
        (
            "github two signatures in one value",
            format!("sha256={gh_hex},sha256={gh_hex}"),
        ),
    ];
    for (case, value) in refusals {
        let headers = github_with(&value, "gh-enc");
        refused(&app, case, "github", &headers, gh_body.clone(), invalid).await;
    }
    let headers = github_with(&format!("sha256={}", gh_hex.to_uppercase()), "gh-upper");
    accepted(
        &app,
        "github upper-case hex",
        "github",
        &headers,
        gh_body.clone(),
    )
    .await;
    stored += 1;

    // Standard Webhooks: base64, space-separated `v1,<sig>` items.
    let sv_body = br#"{"type":"invoice.created"}"#.to_vec();
    let sv = |id: &str| svix_sig(SVIX_SECRET, id, &ts, &sv_body);
    let key = base64::engine::general_purpose::STANDARD
        .decode(SVIX_SECRET.trim_start_matches("whsec_"))
        .unwrap();
    let sv_mac = |id: &str| hmac_sha256(&key, &cat(&format!("{id}.{ts}."), &sv_body));
    let refusals = [
        (
            "svix hex signature",
            format!("v1,{}", hex::encode(sv_mac("msg_enc"))),
        ),
        ("svix v1= instead of v1,", format!("v1={}", sv("msg_enc"))),
        ("svix space after comma", format!("v1, {}", sv("msg_enc"))),
        ("svix v2 version", format!("v2,{}", sv("msg_enc"))),
        (
            "svix version in upper case",
            format!("V1,{}", sv("msg_enc")),
        ),
        (
            "svix v1a (asymmetric) only",
            format!("v1a,{}", sv("msg_enc")),
        ),
        (
            "svix comma-separated list",
            format!("v1,{},v1,{}", "QUFB", sv("msg_enc")),
        ),
        (
            "svix tab-separated list",
            format!("v1,QUFB\tv1,{}", sv("msg_enc")),
        ),
    ];
    for (case, value) in refusals {
        let headers = svix_with("msg_enc", &ts, &value);
        refused(&app, case, "svix", &headers, sv_body.clone(), invalid).await;
    }
    // base64url is another alphabet: a MAC whose base64 has '+' or '/' is refused in base64url.
    let (url_id, url_sig) = (0..)
        .map(|i| format!("msg_url_{i}"))
        .map(|id| {
            let s = sv(&id);
            (id, s)
        })
        .find(|(_, s)| s.contains('+') || s.contains('/'))
        .unwrap();
    let url_safe = url_sig.replace('+', "-").replace('/', "_");
    let headers = svix_with(&url_id, &ts, &format!("v1,{url_safe}"));
    refused(
        &app,
        "svix base64url alphabet",
        "svix",
        &headers,
        sv_body.clone(),
        invalid,
    )
    .await;
    // Accepted by design: padding is optional (senders disagree on it), items may be separated
    // by several spaces, and unknown versions (v1a) are skipped rather than refused.
    let id = "msg_unpadded";
    let headers = svix_with(id, &ts, &format!("v1,{}", sv(id).trim_end_matches('=')));
    accepted(
        &app,
        "svix unpadded base64",
        "svix",
        &headers,
        sv_body.clone(),
    )
    .await;
    let id = "msg_multi_space";
    let headers = svix_with(id, &ts, &format!("v1a,QUFB   v1,QUFB  v1,{}", sv(id)));
    accepted(
        &app,
        "svix several spaces and a v1a item",
        "svix",
        &headers,
        sv_body.clone(),
    )
    .await;
    stored += 2;

    // Shopify: base64 of the body's HMAC, the whole value; hex or a prefix is refused.
    let sh_body = br#"{"order":1}"#.to_vec();
    let sh_mac = hmac_sha256(SHOPIFY_SECRET.as_bytes(), &sh_body);
    let headers = shopify_with(&hex::encode(&sh_mac), "shop-hex");
    refused(
        &app,
        "shopify hex signature",
        "shop",
        &headers,
        sh_body.clone(),
        invalid,
    )
    .await;
    let headers = shopify_with(&format!("sha256={}", b64(&sh_mac)), "shop-prefixed");
    refused(
        &app,
        "shopify with a prefix",
        "shop",
        &headers,
        sh_body.clone(),
        invalid,
    )
    .await;
    let headers = shopify_with(&b64(&sh_mac), "shop-ok");
    accepted(&app, "shopify base64", "shop", &headers, sh_body.clone()).await;
    stored += 1;

    // Slack: `v0=` prefix and hex.
    let sl_body = slack_body("EvEnc");
    let sl_sig = slack_sig(SLACK_SECRET, &ts, sl_body.as_bytes());
    for (case, value) in [
        ("slack no v0= prefix", sl_sig.clone()),
        ("slack v1= prefix", format!("v1={sl_sig}")),
        (
            "slack base64 signature",
            format!("v0={}", b64(&hex::decode(&sl_sig).unwrap())),
        ),
    ] {
        let headers = slack_with(&value, &ts);
        refused(&app, case, "slack", &headers, sl_body.clone(), invalid).await;
    }

    assert_eq!(app.store.count_events().await.unwrap(), stored);
}

// =======================================================================================
// Empty values.

async fn empty_values_are_refused(backend: Backend) {
    let app = spawn(backend).await;
    let ts = now().to_string();
    let missing = (401, "missing_signature");
    let invalid = (401, "invalid_signature");

    let body = stripe_body("evt_empty");
    // A header that is present but empty (or blank) is the same as no header.
    refused(
        &app,
        "stripe empty header",
        "stripe",
        &stripe_with(""),
        body.clone(),
        missing,
    )
    .await;
    refused(
        &app,
        "stripe blank header",
        "stripe",
        &stripe_with("   "),
        body.clone(),
        missing,
    )
    .await;
    for (case, value) in [
        ("stripe empty pairs", "t=,v1=".to_owned()),
        ("stripe only separators", ",,,".to_owned()),
        ("stripe only =", "=".to_owned()),
        ("stripe empty v1", format!("t={ts},v1=")),
    ] {
        refused(
            &app,
            case,
            "stripe",
            &stripe_with(&value),
            body.clone(),
            invalid,
        )
        .await;
    }
    // An empty t= with a MAC over an empty timestamp: the MAC matches, the timestamp is not
    // a number.
    let sig = stripe_sig(STRIPE_SECRET, "", body.as_bytes());
    refused(
        &app,
        "stripe empty t, signed",
        "stripe",
        &stripe_with(&format!("t=,v1={sig}")),
        body.clone(),
        invalid,
    )
    .await;

    let gh = b"{}".to_vec();
    refused(
        &app,
        "github empty signature",
        "github",
        &github_with("", "gh-e"),
        gh.clone(),
        missing,
    )
    .await;
    refused(
        &app,
        "github empty after prefix",
        "github",
        &github_with("sha256=", "gh-e"),
        gh.clone(),
        invalid,
    )
    .await;
    // Verified, but the delivery id (the dedupe key) is empty.
    let sig = format!("sha256={}", github_sig(GITHUB_SECRET, &gh));
    refused(
        &app,
        "github empty delivery id",
        "github",
        &github_with(&sig, ""),
        gh.clone(),
        (400, "missing_event_id"),
    )
    .await;
    refused(
        &app,
        "github blank delivery id",
        "github",
        &github_with(&sig, "   "),
        gh.clone(),
        (400, "missing_event_id"),
    )
    .await;

    let sv = br#"{"type":"x"}"#.to_vec();
    refused(
        &app,
        "svix empty signature",
        "svix",
        &svix_with("msg_e", &ts, ""),
        sv.clone(),
        missing,
    )
    .await;
    refused(
        &app,
        "svix v1, with nothing",
        "svix",
        &svix_with("msg_e", &ts, "v1,"),
        sv.clone(),
        invalid,
    )
    .await;
    // The id is signed: an empty id cannot be checked (and would be no dedupe key).
    let signed_empty_id = format!("v1,{}", svix_sig(SVIX_SECRET, "", &ts, &sv));
    refused(
        &app,
        "svix empty id, signed",
        "svix",
        &svix_with("", &ts, &signed_empty_id),
        sv.clone(),
        invalid,
    )
    .await;
    // An empty timestamp header is present: the MAC is checked over it, then refused.
    let signed_empty_ts = format!("v1,{}", svix_sig(SVIX_SECRET, "msg_e", "", &sv));
    refused(
        &app,
        "svix empty timestamp, signed",
        "svix",
        &svix_with("msg_e", "", &signed_empty_ts),
        sv.clone(),
        invalid,
    )
    .await;

    let sl = slack_body("EvEmpty");
    let sig = format!("v0={}", slack_sig(SLACK_SECRET, "", sl.as_bytes()));
    refused(
        &app,
        "slack empty timestamp, signed",
        "slack",
        &slack_with(&sig, ""),
        sl.clone(),
        invalid,
    )
    .await;
    refused(
        &app,
        "slack empty signature",
        "slack",
        &slack_with("", &ts),
        sl.clone(),
        missing,
    )
    .await;
    // No timestamp header at all.
    let headers = h(&[(
        "X-Slack-Signature",
        &format!("v0={}", slack_sig(SLACK_SECRET, &ts, sl.as_bytes())),
    )]);
    refused(
        &app,
        "slack no timestamp header",
        "slack",
        &headers,
        sl.clone(),
        missing,
    )
    .await;

    refused(
        &app,
        "shopify empty signature",
        "shop",
        &shopify_with("", "s"),
        b"{}".to_vec(),
        missing,
    )
    .await;
    // An empty body, correctly signed: verified, but Stripe's id is read from the body.
    let sig = stripe_sig(STRIPE_SECRET, &ts, b"");
    refused(
        &app,
        "stripe empty body, signed",
        "stripe",
        &stripe_with(&format!("t={ts},v1={sig}")),
        "",
        (400, "malformed_body"),
    )
    .await;

    assert_eq!(app.store.count_events().await.unwrap(), 0);
}

// =======================================================================================
// Duplicate and repeated headers.

async fn duplicate_and_repeated_headers(backend: Backend) {
    let app = spawn(backend).await;
    let ts = now().to_string();
    let invalid = (401, "invalid_signature");

    // The same signature header twice, even with both copies valid, is refused rather than
    // guessed at (README: "A signature header sent twice is refused").
    let body = stripe_body("evt_repeat");
    let mut headers = stripe_signed(&body);
    headers.push(headers[0].clone());
    refused(
        &app,
        "stripe header twice, both valid",
        "stripe",
        &headers,
        body.clone(),
        invalid,
    )
    .await;
    let mut headers = stripe_with(&format!("t={ts},v1={}", "00".repeat(32)));
    headers.extend(stripe_signed(&body).into_iter().take(1));
    refused(
        &app,
        "stripe bad header then good header",
        "stripe",
        &headers,
        body.clone(),
        invalid,
    )
    .await;
    // Two t= in one value make the signed string ambiguous.
    let sig = stripe_sig(STRIPE_SECRET, &ts, body.as_bytes());
    let value = format!("t={ts},t={ts},v1={sig}");
    refused(
        &app,
        "stripe two t= pairs",
        "stripe",
        &stripe_with(&value),
        body.clone(),
        invalid,
    )
    .await;
    let value = format!("t={ts},v1={sig},t=1");
    refused(
        &app,
        "stripe t= after the signature",
        "stripe",
        &stripe_with(&value),
        body.clone(),
        invalid,
    )
    .await;
    // Two values folded into one by a proxy (RFC 9110 list folding) carry two t= pairs.
    let value = format!("t={ts},v1={sig}, t={ts},v1={sig}");
    refused(
        &app,
        "stripe two values folded into one",
        "stripe",
        &stripe_with(&value),
        body.clone(),
        invalid,
    )
    .await;

    let gh = br#"{"a":1}"#.to_vec();
    let mut headers = github_signed(&gh, "gh-rep");
    headers.push(headers[0].clone());
    refused(
        &app,
        "github signature twice",
        "github",
        &headers,
        gh.clone(),
        invalid,
    )
    .await;

    let sl = slack_body("EvRep");
    let mut headers = slack_signed_at(&ts, sl.as_bytes());
    headers.push(headers[0].clone());
    refused(
        &app,
        "slack signature twice",
        "slack",
        &headers,
        sl.clone(),
        invalid,
    )
    .await;
    let mut headers = slack_signed_at(&ts, sl.as_bytes());
    headers.push(headers[1].clone());
    refused(
        &app,
        "slack timestamp twice",
        "slack",
        &headers,
        sl.clone(),
        invalid,
    )
    .await;

    let sv = br#"{"type":"x"}"#.to_vec();
    for (case, index) in [
        ("svix id twice", 0),
        ("svix timestamp twice", 1),
        ("svix signature twice", 2),
    ] {
        let mut headers = svix_signed_at("msg_rep", &ts, &sv);
        headers.push(headers[index].clone());
        refused(&app, case, "svix", &headers, sv.clone(), invalid).await;
    }
    // Both header families: `webhook-signature` comes first in the definition and is used;
    // a bad one there is not rescued by a good `svix-signature`.
    let mut headers = svix_signed_at("msg_both", &ts, &sv);
    headers.push(("webhook-signature".into(), format!("v1,{}", b64(&[0; 32]))));
    refused(
        &app,
        "svix bad webhook-signature beside a good svix-signature",
        "svix",
        &headers,
        sv.clone(),
        invalid,
    )
    .await;

    let sh = b"{}".to_vec();
    let mut headers = shopify_with(&shopify_sig(SHOPIFY_SECRET, &sh), "shop-rep");
    headers.push(headers[0].clone());
    refused(
        &app,
        "shopify signature twice",
        "shop",
        &headers,
        sh.clone(),
        invalid,
    )
    .await;

    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Accepted by design: GitHub's delivery id is not signed, so a repeated one is not an
    // authentication question; the first value is the dedupe key.
    let mut headers = github_signed(&gh, "gh-first");
    headers.push(("X-GitHub-Delivery".into(), "gh-second".into()));
    let event = accepted(
        &app,
        "github delivery id twice",
        "github",
        &headers,
        gh.clone(),
    )
    .await;
    assert_eq!(event.provider_event_id, "gh-first");
    // Every copy is kept in the stored headers, in the order received.
    let deliveries: Vec<_> = event
        .headers
        .iter()
        .filter(|(n, _)| n == "x-github-delivery")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(deliveries, ["gh-first", "gh-second"]);
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

// =======================================================================================
// Timestamps.

async fn timestamps_far_past_far_future_and_non_numeric(backend: Backend) {
    let app = spawn(backend).await;
    let tolerance = (401, "timestamp_out_of_tolerance");
    let invalid = (401, "invalid_signature");
    let n = now();

    // (case, timestamp as sent, answer). The MAC is always correct for the string sent, so
    // the answer is about the timestamp alone.
    let cases: Vec<(&str, String, (u16, &str))> = vec![
        ("epoch", "0".into(), tolerance),
        ("one", "1".into(), tolerance),
        ("an hour ago", (n - 3600).to_string(), tolerance),
        ("301 s ago", (n - 301 - 5).to_string(), tolerance),
        ("an hour ahead", (n + 3600).to_string(), tolerance),
        (
            "a century ahead",
            (n + 100 * 365 * 86_400).to_string(),
            tolerance,
        ),
        ("i64::MAX", i64::MAX.to_string(), tolerance),
        ("past i64::MAX", "99999999999999999999999".into(), tolerance),
        ("milliseconds", (n * 1000).to_string(), tolerance),
        ("negative", format!("-{n}"), invalid),
        ("plus sign", format!("+{n}"), invalid),
        ("decimal", format!("{n}.0"), invalid),
        ("exponent", "1.7e9".into(), invalid),
        ("hex", format!("0x{n:x}"), invalid),
        ("letters", "abc".into(), invalid),
        ("RFC 3339", "2024-05-01T00:00:00Z".into(), invalid),
        (
            "inner space",
            format!("{} {}", &n.to_string()[..5], &n.to_string()[5..]),
            invalid,
        ),
        (
            "full-width digits",
            n.to_string()
                .chars()
                .map(|c| char::from_u32(c as u32 - '0' as u32 + 0xFF10).unwrap())
                .collect(),
            invalid,
        ),
    ];
    for (i, (case, ts, expect)) in cases.iter().enumerate() {
        let body = stripe_body(&format!("evt_ts_{i}"));
        let value = format!(
            "t={ts},v1={}",
            stripe_sig(STRIPE_SECRET, ts, body.as_bytes())
        );
        refused(
            &app,
            &format!("stripe {case}"),
            "stripe",
            &stripe_with(&value),
            body,
            *expect,
        )
        .await;

        let sl = slack_body(&format!("EvTs{i}"));
        let headers = slack_signed_at(ts, sl.as_bytes());
        refused(
            &app,
            &format!("slack {case}"),
            "slack",
            &headers,
            sl,
            *expect,
        )
        .await;

        let sv = br#"{"type":"t"}"#.to_vec();
        let headers = svix_signed_at(&format!("msg_ts_{i}"), ts, &sv);
        refused(&app, &format!("svix {case}"), "svix", &headers, sv, *expect).await;
    }
    // A wrong MAC with a stale timestamp is an invalid signature: the MAC is checked first,
    // so an unauthenticated caller learns nothing about the clock.
    let body = stripe_body("evt_ts_forged");
    let value = format!("t=1,v1={}", "00".repeat(32));
    refused(
        &app,
        "forged and stale",
        "stripe",
        &stripe_with(&value),
        body,
        invalid,
    )
    .await;
    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Accepted by design: within the 300 s tolerance in both directions; and leading zeros,
    // since the MAC covers the exact digits sent and their value is in tolerance.
    let ok: [(&str, String); 3] = [
        ("250 s ago", (n - 250).to_string()),
        ("250 s ahead", (n + 250).to_string()),
        ("leading zeros", format!("000{n}")),
    ];
    for (i, (case, ts)) in ok.iter().enumerate() {
        let body = stripe_body(&format!("evt_ts_ok_{i}"));
        let value = format!(
            "t={ts},v1={}",
            stripe_sig(STRIPE_SECRET, ts, body.as_bytes())
        );
        accepted(&app, case, "stripe", &stripe_with(&value), body).await;
    }
    assert_eq!(app.store.count_events().await.unwrap(), 3);
}

// =======================================================================================
// Bodies over the limit.

fn chunked_stream(body: &[u8], chunk: usize) -> reqwest::Body {
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        body.chunks(chunk).map(|c| Ok(c.to_vec())).collect();
    reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
}

/// A Stripe body of exactly `len` bytes.
fn stripe_body_of_len(id: &str, len: usize) -> String {
    let frame = format!(r#"{{"id":"{id}","pad":""}}"#);
    let body = frame.replace(
        r#""pad":"""#,
        &format!(r#""pad":"{}""#, "p".repeat(len - frame.len())),
    );
    assert_eq!(body.len(), len);
    body
}

async fn bodies_over_the_limit_with_content_length_or_chunked(backend: Backend) {
    let app = spawn(backend).await;
    let too_large = (413, "payload_too_large");

    // One byte over, with a correct Content-Length, then chunked (no Content-Length), in
    // small and in one big chunk. All correctly signed: only the size is wrong.
    let body = stripe_body_of_len("evt_big", MAX_BODY + 1);
    let headers = stripe_signed(&body);
    refused(
        &app,
        "1 byte over, Content-Length",
        "stripe",
        &headers,
        body.clone(),
        too_large,
    )
    .await;
    refused(
        &app,
        "1 byte over, chunked by 100",
        "stripe",
        &headers,
        chunked_stream(body.as_bytes(), 100),
        too_large,
    )
    .await;
    refused(
        &app,
        "1 byte over, chunked in one",
        "stripe",
        &headers,
        chunked_stream(body.as_bytes(), body.len()),
        too_large,
    )
    .await;
    let body = stripe_body_of_len("evt_big2", 3 * MAX_BODY);
    let headers = stripe_signed(&body);
    refused(
        &app,
        "3x over, chunked by 1000",
        "stripe",
        &headers,
        chunked_stream(body.as_bytes(), 1000),
        too_large,
    )
    .await;
    // Over the limit on an unsigned request: still 413 (the body is never verified).
    refused(
        &app,
        "over, unsigned",
        "github",
        &[],
        vec![b'x'; MAX_BODY * 2],
        too_large,
    )
    .await;

    // A huge declared Content-Length is refused before any of the body is read: the answer
    // comes at once although the body never arrives.
    let started = Instant::now();
    let r = raw_request(
        &app,
        b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 1000000000000\r\n\r\n{",
    )
    .await;
    assert_eq!(r.error_code(), (413, "payload_too_large".into()));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The unread body is not drained: the connection is closed after the answer.
    assert!(r.closed, "{r:?}");

    // A chunked body declaring one enormous chunk, then sending past the limit.
    let mut raw = b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n".to_vec();
    raw.extend(vec![b'a'; MAX_BODY + 10]);
    let r = raw_request(&app, &raw).await;
    assert_eq!(r.error_code(), (413, "payload_too_large".into()));
    // The rest of the body is not read: the connection is closed after the answer, so the
    // client cannot keep it (and its socket) with a body that never ends.
    assert!(r.closed, "{r:?}");

    // A chunk size past u64 is a framing error from the HTTP parser: 400, before the handler.
    let raw = b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\naaaa\r\n0\r\n\r\n";
    let r = raw_request(&app, raw).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.closed, "{r:?}");

    // A chunked body whose framing breaks after the first chunk: the handler's body read
    // fails, answered 400 `bad_request` (a code the README's ingest table does not list).
    let raw = b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"id\"\r\nzz\r\n\r\n";
    let r = raw_request(&app, raw).await;
    assert_eq!(r.error_code(), (400, "bad_request".into()));
    assert!(r.closed, "{r:?}");

    // A body shorter than its Content-Length, then the client half-closes.
    let mut stream = TcpStream::connect(socket_addr(&app)).await.unwrap();
    stream
        .write_all(
            b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"id\":",
        )
        .await
        .unwrap();
    stream.shutdown().await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await;
    let r = RawResponse::parse(&buf, true).expect("an answer to a truncated body");
    assert_eq!(r.error_code(), (400, "bad_request".into()));

    // An unknown source is answered 404 whatever the body size: the source is checked first.
    let r = app
        .post_webhook("nope", &[], vec![b'x'; MAX_BODY * 2])
        .await;
    assert_eq!(error_code(r).await, (404, "unknown_source".into()));
    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Accepted: exactly at the limit, chunked (the Content-Length case is in api::ingest).
    let body = stripe_body_of_len("evt_edge_chunked", MAX_BODY);
    let headers = stripe_signed(&body);
    accepted(
        &app,
        "exactly at the limit, chunked",
        "stripe",
        &headers,
        chunked_stream(body.as_bytes(), 999),
    )
    .await;
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

// =======================================================================================
// Invalid UTF-8, deep JSON, duplicated keys.

async fn invalid_utf8_deep_json_and_duplicate_id_keys(backend: Backend) {
    let app = spawn_with(backend, |s| s.server.max_body_bytes = 64 * 1024).await;
    let ts = now().to_string();
    let malformed = (400, "malformed_body");
    let stripe_raw = |body: &[u8]| {
        stripe_with(&format!(
            "t={ts},v1={}",
            stripe_sig(STRIPE_SECRET, &ts, body)
        ))
    };

    // Bodies the id must be read from, each signed correctly.
    let mut deep_array = b"{\"id\":\"evt_deep\",\"x\":".to_vec();
    deep_array.extend(vec![b'['; 10_000]);
    deep_array.extend(vec![b']'; 10_000]);
    deep_array.push(b'}');
    let mut deep_object = Vec::new();
    for _ in 0..5_000 {
        deep_object.extend_from_slice(b"{\"a\":");
    }
    deep_object.extend_from_slice(b"{\"id\":\"evt_deep_obj\"}");
    deep_object.extend(vec![b'}'; 5_000]);
    let cases: Vec<(&str, Vec<u8>, (u16, &str))> = vec![
        (
            "invalid UTF-8 inside the id string",
            b"{\"id\":\"evt_\xff\xfe\"}".to_vec(),
            malformed,
        ),
        (
            "overlong UTF-8 encoding of '/'",
            b"{\"id\":\"evt_\xc0\xaf\"}".to_vec(),
            malformed,
        ),
        (
            "UTF-8 BOM before the JSON",
            b"\xef\xbb\xbf{\"id\":\"evt_bom\"}".to_vec(),
            malformed,
        ),
        (
            "UTF-16LE JSON",
            "{\"id\":\"evt_utf16\"}"
                .encode_utf16()
                .flat_map(u16::to_le_bytes)
                .collect(),
            malformed,
        ),
        (
            "lone surrogate escape",
            br#"{"id":"evt_\ud800"}"#.to_vec(),
            malformed,
        ),
        (
            "10,000 nested arrays (valid JSON)",
            deep_array.clone(),
            malformed,
        ),
        ("5,000 nested objects around the id", deep_object, malformed),
        ("10,000 unclosed arrays", vec![b'['; 10_000], malformed),
        (
            "two JSON documents",
            br#"{"id":"evt_a"}{"id":"evt_b"}"#.to_vec(),
            malformed,
        ),
        (
            "trailing garbage",
            br#"{"id":"evt_trailing"} x"#.to_vec(),
            malformed,
        ),
        (
            "NUL escape in the id",
            br#"{"id":"evt_\u0000"}"#.to_vec(),
            (400, "invalid_event_id"),
        ),
        (
            "newline escape in the id",
            br#"{"id":"evt_\nX-Injected: 1"}"#.to_vec(),
            (400, "invalid_event_id"),
        ),
        (
            "id of 256 bytes",
            format!(r#"{{"id":"{}"}}"#, "e".repeat(256)).into_bytes(),
            (400, "invalid_event_id"),
        ),
        (
            "id is an object",
            br#"{"id":{"a":1}}"#.to_vec(),
            (400, "missing_event_id"),
        ),
        (
            "id is null",
            br#"{"id":null}"#.to_vec(),
            (400, "missing_event_id"),
        ),
        (
            "id is blank",
            br#"{"id":"   "}"#.to_vec(),
            (400, "missing_event_id"),
        ),
        (
            "body is an array",
            br#"[{"id":"evt_arr"}]"#.to_vec(),
            (400, "missing_event_id"),
        ),
        // Duplicate keys: serde_json keeps the last value, so a later null wins.
        (
            "duplicate id, the last null",
            br#"{"id":"evt_dup_null","id":null}"#.to_vec(),
            (400, "missing_event_id"),
        ),
    ];
    for (case, body, expect) in cases {
        refused(&app, case, "stripe", &stripe_raw(&body), body, expect).await;
    }
    // Slack reads its id from the body too.
    let sl = b"{\"event_id\":\"Ev\xff\"}".to_vec();
    refused(
        &app,
        "slack invalid UTF-8",
        "slack",
        &slack_signed_at(&ts, &sl),
        sl,
        malformed,
    )
    .await;
    // The server is still up and answering after all of that.
    let r = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Accepted by design: depth is bounded by serde_json's recursion limit (128), so a
    // moderately nested body is fine.
    let mut nested = b"{\"id\":\"evt_nested_100\",\"x\":".to_vec();
    nested.extend(vec![b'['; 100]);
    nested.extend(vec![b']'; 100]);
    nested.push(b'}');
    accepted(
        &app,
        "100 nested arrays",
        "stripe",
        &stripe_raw(&nested),
        nested.clone(),
    )
    .await;

    // Accepted by design: a duplicated `id` key. serde_json keeps the last value, so the event
    // is stored under "evt_last" (the signed body is kept byte for byte, both keys included).
    // A later event whose id is "evt_last" is then a duplicate of it.
    let dup = br#"{"id":"evt_first","type":"a","id":"evt_last"}"#.to_vec();
    let event = accepted(
        &app,
        "duplicate id key",
        "stripe",
        &stripe_raw(&dup),
        dup.clone(),
    )
    .await;
    assert_eq!(event.provider_event_id, "evt_last");
    assert_eq!(event.body, dup);
    assert!(app
        .store
        .find_event("stripe", "evt_first")
        .await
        .unwrap()
        .is_none());
    let plain = br#"{"id":"evt_last"}"#.to_vec();
    let r = app
        .post_webhook("stripe", &stripe_raw(&plain), plain.clone())
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["idempotent-replayed"], "true");

    // Numeric ids are accepted as their decimal text; one within 64 bits is kept exactly.
    let num = br#"{"id":18446744073709551615}"#.to_vec();
    let event = accepted(
        &app,
        "numeric id u64::MAX",
        "stripe",
        &stripe_raw(&num),
        num,
    )
    .await;
    assert_eq!(event.provider_event_id, "18446744073709551615");
    // Past 64 bits a number has no exact text (serde_json would round it, and distinct ids
    // would collide), so such an id is refused rather than merged.
    for big in [
        &br#"{"id":18446744073709551616}"#[..],
        br#"{"id":18446744073709551617}"#,
        br#"{"id":1.5}"#,
    ] {
        let r = app
            .post_webhook("stripe", &stripe_raw(big), big.to_vec())
            .await;
        assert_eq!(error_code(r).await, (400, "missing_event_id".into()));
    }

    // Accepted by design: when the id is not in the body, the body is opaque bytes. GitHub's
    // invalid UTF-8 and svix's deep JSON (whose type then cannot be read) are stored as sent.
    let bin: Vec<u8> = vec![0xff, 0xfe, 0x00, b'{', 0xc0, 0xaf];
    let event = accepted(
        &app,
        "github invalid UTF-8 body",
        "github",
        &github_signed(&bin, "gh-bin"),
        bin.clone(),
    )
    .await;
    assert_eq!(event.body, bin);
    let event = accepted(
        &app,
        "svix 10,000 nested arrays",
        "svix",
        &svix_signed_at("msg_deep", &ts, &deep_array),
        deep_array.clone(),
    )
    .await;
    assert_eq!(event.body, deep_array);
    assert_eq!(event.event_type, None);
    // The ids past 64 bits were refused, so five events were stored.
    assert_eq!(app.store.count_events().await.unwrap(), 5);
}

// =======================================================================================
// Unknown sources and path traversal.

async fn unknown_sources_and_path_traversal(backend: Backend) {
    let app = spawn(backend).await;
    let unknown = (404, "unknown_source");
    let not_found = (404, "not_found");

    // Through the client: plain unknown names. Each request is correctly signed for `stripe`.
    let body = stripe_body("evt_unknown");
    let headers = stripe_signed(&body);
    for name in [
        "nope",
        "STRIPE",
        "Stripe",
        "stripe-typo",
        "stripe%20",
        "%20stripe",
        "stripe.",
        &"s".repeat(300),
    ] {
        refused(&app, name, name, &headers, body.clone(), unknown).await;
    }
    // The error message names the source, cut to 64 characters.
    let r = app
        .post_webhook(&"s".repeat(300), &headers, body.clone())
        .await;
    let json: serde_json::Value = r.json().await.unwrap();
    let message = json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&"s".repeat(64)) && !message.contains(&"s".repeat(65)),
        "{message}"
    );

    // Raw request targets, so no client normalises them. (target, answer); the body and
    // signature are valid for `stripe` each time, with a fresh event id.
    let targets: [(&str, (u16, &str)); 18] = [
        ("/webhooks/..%2Fstripe", unknown),
        ("/webhooks/..%2fstripe", unknown),
        ("/webhooks/%2e%2e%2fstripe", unknown),
        ("/webhooks/%2E%2E%2Fwebhooks%2Fstripe", unknown),
        ("/webhooks/..", unknown),
        ("/webhooks/%2e%2e", unknown),
        ("/webhooks/stripe%00", unknown),
        ("/webhooks/stripe%2F..", unknown),
        ("/webhooks/stripe;x", unknown),
        ("/webhooks/stripe%0d%0aSet-Cookie:%20a=b", unknown),
        ("/webhooks/%ff%fe", unknown),
        ("/webhooks/../webhooks/stripe", not_found),
        ("/webhooks/./stripe", not_found),
        ("/webhooks//stripe", not_found),
        ("/webhooks/stripe/", not_found),
        ("/webhooks/", not_found),
        ("//webhooks/stripe", not_found),
        ("/admin/v1/../../webhooks/stripe", not_found),
    ];
    for (i, (target, expect)) in targets.iter().enumerate() {
        let body = stripe_body(&format!("evt_path_{i}"));
        let raw = raw_post(
            target,
            &[
                &stripe_signature_line(body.as_bytes()),
                b"Content-Type: application/json",
            ],
            body.as_bytes(),
        );
        let before = store_counts(&app).await;
        let r = raw_request(&app, &raw).await;
        assert_eq!(
            r.error_code(),
            (expect.0, expect.1.to_owned()),
            "target {target}"
        );
        assert!(r.header("set-cookie").is_none(), "target {target}: {r:?}");
        assert_eq!(store_counts(&app).await, before, "target {target}");
    }
    // Any other method on a webhook URL, configured source or not: 405 with `Allow: POST`.
    for (method, path) in [
        (reqwest::Method::GET, "/webhooks/stripe"),
        (reqwest::Method::PUT, "/webhooks/stripe"),
        (reqwest::Method::DELETE, "/webhooks/nope"),
    ] {
        let r = app
            .client
            .request(method.clone(), app.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["allow"], "POST", "{method} {path}");
        assert_eq!(
            error_code(r).await,
            (405, "method_not_allowed".into()),
            "{method} {path}"
        );
    }
    let r = app
        .client
        .head(app.url("/webhooks/stripe"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "POST");
    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Accepted by design: targets that decode to exactly `/webhooks/stripe` are that source.
    // `%73` is an unreserved character ('s'), which percent-decoding turns into the same name;
    // the query string is not part of the path; and an absolute-form target names the path.
    let legit = [
        "/webhooks/%73tripe",
        "/webhooks/stripe?source=../../etc/passwd",
        "http://127.0.0.1/webhooks/stripe",
    ];
    for (i, target) in legit.iter().enumerate() {
        let body = stripe_body(&format!("evt_legit_path_{i}"));
        let raw = raw_post(
            target,
            &[
                &stripe_signature_line(body.as_bytes()),
                b"Content-Type: application/json",
            ],
            body.as_bytes(),
        );
        let r = raw_request(&app, &raw).await;
        assert_eq!(r.status, 200, "target {target}: {r:?}");
        let stored = app
            .store
            .find_event("stripe", &format!("evt_legit_path_{i}"))
            .await
            .unwrap();
        assert_eq!(stored.expect("stored").source, "stripe");
    }
    assert_eq!(app.store.count_events().await.unwrap(), legit.len() as i64);
}

// =======================================================================================
// Header injection and malformed HTTP.

async fn header_injection_and_malformed_http(backend: Backend) {
    let app = spawn(backend).await;
    let gh = br#"{"inject":true}"#.to_vec();
    let sig_line = format!(
        "X-Hub-Signature-256: sha256={}",
        github_sig(GITHUB_SECRET, &gh)
    )
    .into_bytes();

    // Requests the HTTP parser refuses: 400 with no body, before any handler runs, and the
    // connection is closed (nothing after the bad bytes is read as another request).
    let refused_by_parser: [(&str, &[u8]); 9] = [
        (
            "obs-fold continuation line",
            b"X-GitHub-Delivery: abc\r\n X-Injected: 1",
        ),
        (
            "bare CR inside a value",
            b"X-GitHub-Delivery: abc\rX-Injected: 1",
        ),
        ("NUL inside a value", b"X-GitHub-Delivery: abc\x00def"),
        ("DEL inside a value", b"X-GitHub-Delivery: abc\x7fdef"),
        ("space before the colon", b"X-GitHub-Delivery : abc"),
        ("no colon", b"X-GitHub-Delivery abc"),
        ("two Content-Length", b"Content-Length: 0"),
        (
            "Content-Length and chunked (smuggling)",
            b"Transfer-Encoding: chunked",
        ),
        ("non-ASCII header name", b"X-\xc3\xa9: 1"),
    ];
    for (case, line) in refused_by_parser {
        let raw = raw_post("/webhooks/github", &[&sig_line, line], &gh);
        let before = store_counts(&app).await;
        let r = raw_request(&app, &raw).await;
        assert_eq!(r.status, 400, "case {case}: {r:?}");
        assert!(r.body.is_empty() && r.closed, "case {case}: {r:?}");
        assert_eq!(store_counts(&app).await, before, "case {case}");
    }
    let framing: [(&str, &[u8]); 4] = [
        ("CRLF in the request target", b"POST /webhooks/github\r\nX-Injected: 1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        ("Content-Length with a plus sign", b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: +2\r\n\r\n{}"),
        ("Transfer-Encoding gzip, chunked", b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
        ("two Host headers", b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\nHost: y\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"),
    ];
    for (case, raw) in framing {
        let r = raw_request(&app, raw).await;
        assert_eq!(r.status, 400, "case {case}: {r:?}");
        assert!(r.body.is_empty() && r.closed, "case {case}: {r:?}");
    }
    // A request head over the parser's buffer (128 KiB) gets 431, and so do 100 headers
    // (over its limit of 96).
    let big = format!("X-Big: {}", "b".repeat(140 * 1024)).into_bytes();
    let r = raw_request(&app, &raw_post("/webhooks/github", &[&big], &gh)).await;
    assert_eq!(r.status, 431, "{r:?}");
    let many: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("X-H{i}: {i}").into_bytes())
        .collect();
    let many: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
    let r = raw_request(&app, &raw_post("/webhooks/github", &many, &gh)).await;
    assert_eq!(r.status, 431, "{r:?}");
    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Control characters the parser lets through (HTAB) reach the id check: refused as an id.
    let raw = raw_post(
        "/webhooks/github",
        &[&sig_line, b"X-GitHub-Delivery: abc\tX-Injected: 1"],
        &gh,
    );
    let r = raw_request(&app, &raw).await;
    assert_eq!(r.error_code(), (400, "invalid_event_id".into()));
    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // A bare LF ends a header line (RFC 9112 allows a recipient to accept it): the request
    // has two headers, and the delivery id is exactly "gh-bare-lf": nothing is smuggled into
    // it, and no stored header holds a CR or LF.
    let raw = raw_post(
        "/webhooks/github",
        &[&sig_line, b"X-GitHub-Delivery: gh-bare-lf\nX-Injected: 1"],
        &gh,
    );
    let r = raw_request(&app, &raw).await;
    assert_eq!(r.status, 200, "{r:?}");
    let event = app
        .store
        .find_event("github", "gh-bare-lf")
        .await
        .unwrap()
        .expect("stored");
    assert!(event
        .headers
        .iter()
        .any(|(n, v)| n == "x-injected" && v == "1"));
    assert!(event
        .headers
        .iter()
        .all(|(n, v)| !(n.contains(['\r', '\n']) || v.contains(['\r', '\n']))));

    // Credentials a sender attaches are stored redacted, as documented, whatever their case.
    let raw = raw_post(
        "/webhooks/github",
        &[
            &sig_line,
            b"X-GitHub-Delivery: gh-credentials",
            b"AUTHORIZATION: Bearer sender-secret-1",
            b"proxy-authorization: Basic c2VjcmV0",
            b"Cookie: session=sender-secret-2",
        ],
        &gh,
    );
    assert_eq!(raw_request(&app, &raw).await.status, 200);
    let event = app
        .store
        .find_event("github", "gh-credentials")
        .await
        .unwrap()
        .expect("stored");
    for name in ["authorization", "proxy-authorization", "cookie"] {
        let values: Vec<_> = event.headers.iter().filter(|(n, _)| n == name).collect();
        assert_eq!(values.len(), 1, "{name}: {:?}", event.headers);
        assert_eq!(values[0].1, "[redacted]", "{name}");
    }
    assert!(!format!("{:?}", event.headers).contains("sender-secret"));

    // Reflected input never becomes a response header: the unknown source's name (with an
    // encoded CRLF) comes back only inside the JSON body.
    let r = raw_request(
        &app,
        &raw_post("/webhooks/x%0d%0aSet-Cookie:%20pwned=1", &[], b""),
    )
    .await;
    assert_eq!(r.error_code(), (404, "unknown_source".into()));
    assert!(r.header("set-cookie").is_none(), "{r:?}");
    assert!(!r.head.contains("pwned"), "{r:?}");

    // obs-text (bytes >= 0x80) in a delivery id is let through by the HTTP parser. Three
    // different non-UTF-8 delivery ids, each with a valid signature:
    // A header value that is not UTF-8 is left out, never converted lossily (which would
    // merge the three distinct ids into one and drop two events as duplicates): the id is
    // then missing, and each is refused.
    for id in [&b"gh-\xff"[..], b"gh-\xfe", b"gh-\xfd"] {
        let mut line = b"X-GitHub-Delivery: ".to_vec();
        line.extend_from_slice(id);
        let r = raw_request(
            &app,
            &raw_post("/webhooks/github", &[&sig_line, &line], &gh),
        )
        .await;
        assert_eq!(r.error_code(), (400, "missing_event_id".into()), "{r:?}");
    }
    assert!(app
        .store
        .find_event("github", "gh-\u{fffd}")
        .await
        .unwrap()
        .is_none());
    // gh-bare-lf and gh-credentials.
    assert_eq!(app.store.count_events().await.unwrap(), 2);
}

// =======================================================================================
// Slow clients.

async fn slowloris_app(backend: Backend) -> TestApp {
    spawn_with(backend, |s| s.server.request_timeout = "1s".into()).await
}

/// Sends `prefix`, then one byte (`X`) every 200 ms, until the server closes or `give_up`
/// passes. Returns (time from the first byte to the close, bytes the server sent).
async fn drip(
    stream: &mut TcpStream,
    prefix: &[u8],
    give_up: Duration,
) -> (Option<Duration>, Vec<u8>) {
    let started = Instant::now();
    stream.write_all(prefix).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while started.elapsed() < give_up {
        match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (Some(started.elapsed()), got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => {
                if stream.write_all(b"X").await.is_err() {
                    return (Some(started.elapsed()), got);
                }
            }
        }
    }
    (None, got)
}

async fn a_normal_request_works(app: &TestApp, id: &str) {
    let body = stripe_body(id);
    let r = app
        .post_webhook("stripe", &stripe_signed(&body), body)
        .await;
    assert_eq!(r.status(), 200);
}

async fn slowloris_request_head_is_cut_off_by_the_request_timeout(backend: Backend) {
    let app = slowloris_app(backend).await;
    let mut slow = TcpStream::connect(socket_addr(&app)).await.unwrap();
    let dripping = tokio::spawn(async move {
        drip(
            &mut slow,
            b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nX-Slow: ",
            Duration::from_secs(8),
        )
        .await
    });
    // Meanwhile the gateway serves everyone else.
    tokio::time::sleep(Duration::from_millis(300)).await;
    a_normal_request_works(&app, "evt_during_slowloris").await;

    let (closed_after, answer) = dripping.await.unwrap();
    let closed_after = closed_after.expect("the slow client was never cut off");
    // request_timeout is 1 s; allow scheduling slack.
    assert!(
        closed_after >= Duration::from_millis(900),
        "{closed_after:?}"
    );
    assert!(closed_after < Duration::from_secs(3), "{closed_after:?}");
    let answer = RawResponse::parse(&answer, true).expect("an HTTP answer before the close");
    assert_eq!(answer.status, 408);
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

async fn slow_second_request_head_on_a_kept_alive_connection(backend: Backend) {
    let app = slowloris_app(backend).await;
    let mut stream = TcpStream::connect(socket_addr(&app)).await.unwrap();
    // A complete first request, kept alive, answered.
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    // Then the second request's head, one byte at a time.
    let dripping = tokio::spawn(async move {
        drip(
            &mut stream,
            b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nX-Slow: ",
            Duration::from_millis(6500),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    a_normal_request_works(&app, "evt_during_slow_second_head").await;
    let (closed_after, answer) = dripping.await.unwrap();
    // actix arms its head timer for a connection's first request only; the gateway's own
    // watch (src/http/connection.rs) gives every later head `server.request_timeout` (1 s
    // here) from the previous answer, then answers 408 and closes.
    let closed_after = closed_after.expect("the slow second head was never cut off");
    assert!(closed_after < Duration::from_secs(4), "{closed_after:?}");
    let answer = RawResponse::parse(&answer, true).unwrap_or_else(|| {
        panic!(
            "no HTTP answer before the close: {:?}",
            String::from_utf8_lossy(&answer)
        )
    });
    assert_eq!(answer.error_code(), (408, "request_timeout".into()));
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

/// A chunked body that stops arriving: answered 408, and the connection is closed (not kept
/// for whatever the client sends next), so stalled bodies cannot pile up open sockets.
async fn slow_chunked_body_is_answered_and_closed(backend: Backend) {
    let app = slowloris_app(backend).await;
    let mut streams = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(socket_addr(&app)).await.unwrap();
        stream
            .write_all(
                b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"id\"\r\n",
            )
            .await
            .unwrap();
        streams.push(stream);
    }
    for mut stream in streams {
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(8), stream.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "the connection was not closed");
        let r = RawResponse::parse(&buf, true).expect("an answer before the close");
        assert_eq!(r.error_code(), (408, "request_timeout".into()));
    }
    assert_eq!(app.store.count_events().await.unwrap(), 0);
}

async fn slow_body_after_a_complete_head(backend: Backend) {
    let app = slowloris_app(backend).await;
    let body = stripe_body("evt_slow_body");
    let mut head = format!("POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n", body.len() + 1000).into_bytes();
    head.extend_from_slice(&stripe_signature_line(body.as_bytes()));
    head.extend_from_slice(b"\r\n\r\n");
    let mut stream = TcpStream::connect(socket_addr(&app)).await.unwrap();
    let idle_head = head.clone();
    let dripping =
        tokio::spawn(async move { drip(&mut stream, &head, Duration::from_secs(6)).await });
    // A second client sends the same complete head and then nothing at all.
    let mut idle = TcpStream::connect(socket_addr(&app)).await.unwrap();
    idle.write_all(&idle_head).await.unwrap();
    let idling = tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        tokio::time::timeout(Duration::from_secs(6), idle.read(&mut buf))
            .await
            .map(|r| r.map(|n| buf[..n].to_vec()))
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    a_normal_request_works(&app, "evt_during_slow_body").await;
    let (closed_after, _) = dripping.await.unwrap();
    let idle_answer = idling.await.unwrap();
    // The body has a deadline too (`server.request_timeout`): the dripping client and the
    // one that sends nothing after its head are both answered 408 and closed.
    assert!(
        closed_after.is_some_and(|d| d < Duration::from_secs(4)),
        "the slow body was not cut off: {closed_after:?}"
    );
    let idle_answer = idle_answer
        .expect("answered before 6 s")
        .expect("read the answer");
    assert!(
        idle_answer.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&idle_answer)
    );
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

// =======================================================================================
// Admin tokens.

async fn admin_tokens_missing_foreign_or_one_byte_off(backend: Backend) {
    // Every wrong token must be answered 401 here, not cut short by the limit on failed
    // authentications (api::hardening tests that limit).
    let app = spawn_with(backend, |s| s.admin.auth_failure_burst = 1000).await;
    let acme_event = app.ingest_stripe("evt_admin_hostile").await;
    let jobs_before = app.store.jobs_for_event(acme_event).await.unwrap().len();
    assert_eq!(jobs_before, 2);
    let unauthorized = (401, "unauthorized".to_owned());
    let event_path = format!("/events/{acme_event}");

    // No token at all, on every kind of endpoint, GET and POST.
    let endpoints: [(Method, String, Option<&str>); 5] = [
        (Method::GET, "/events".into(), None),
        (Method::GET, event_path.clone(), None),
        (Method::GET, format!("{event_path}/raw"), None),
        (Method::POST, format!("{event_path}/replay"), Some("{}")),
        (
            Method::POST,
            "/replay".into(),
            Some(r#"{"source":"stripe"}"#),
        ),
    ];
    for (method, path, body) in &endpoints {
        let r = app.admin(method.clone(), "", path, *body, None).await;
        assert_eq!(r.headers()["www-authenticate"], "Bearer", "{path}");
        assert_eq!(
            error_code(r).await,
            unauthorized,
            "{method} {path} without a token"
        );
    }

    // A token differing in one byte: first, middle and last positions; one byte longer or
    // shorter; the same token in another case; the token's SHA-256 digest itself.
    let mut variants = Vec::new();
    for at in [0, ACME_TOKEN.len() / 2, ACME_TOKEN.len() - 1] {
        let mut bytes = ACME_TOKEN.as_bytes().to_vec();
        bytes[at] ^= 0x01;
        variants.push(String::from_utf8(bytes).unwrap());
    }
    variants.push(format!("{ACME_TOKEN}x"));
    variants.push(ACME_TOKEN[..ACME_TOKEN.len() - 1].to_owned());
    variants.push(ACME_TOKEN.to_uppercase());
    {
        use sha2::Digest as _;
        variants.push(hex::encode(sha2::Sha256::digest(ACME_TOKEN.as_bytes())));
    }
    for token in &variants {
        for (method, path, body) in &endpoints {
            let r = app.admin(method.clone(), token, path, *body, None).await;
            assert_eq!(
                error_code(r).await,
                unauthorized,
                "{method} {path} with {token:?}"
            );
        }
    }

    // Malformed Authorization headers with the right token inside.
    let basic = format!("Basic {}", b64(format!("acme:{ACME_TOKEN}").as_bytes()));
    let headers = [
        "Bearer".to_owned(),
        "Bearer ".to_owned(),
        format!("Token {ACME_TOKEN}"),
        format!("Bearer{ACME_TOKEN}"),
        format!("Bearer {ACME_TOKEN} {ACME_TOKEN}"),
        format!("Bearer \"{ACME_TOKEN}\""),
        basic,
        ACME_TOKEN.to_owned(),
    ];
    for value in &headers {
        let r = app
            .client
            .get(app.url("/admin/v1/events"))
            .header("Authorization", value)
            .send()
            .await
            .unwrap();
        assert_eq!(error_code(r).await, unauthorized, "Authorization: {value}");
    }
    // The token in the query string is not a credential.
    let r = app
        .client
        .get(app.url(&format!("/admin/v1/events?access_token={ACME_TOKEN}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // Lower-case `bearer`: HTTP auth schemes are case-insensitive (RFC 9110 11.1), but the
    // gateway matches "Bearer " exactly. A strict refusal, not a hole: documented as is.
    let r = app
        .client
        .get(app.url("/admin/v1/events"))
        .header("Authorization", format!("bearer {ACME_TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // Another tenant's valid token: acme's event is invisible, exactly like a missing one.
    let not_found = (404, "not_found".to_owned());
    for path in [event_path.clone(), format!("{event_path}/raw")] {
        let r = app
            .admin(Method::GET, DEFAULT_TOKEN, &path, None, None)
            .await;
        assert_eq!(error_code(r).await, not_found, "{path}");
    }
    let r = app
        .admin(
            Method::POST,
            DEFAULT_TOKEN,
            &format!("{event_path}/replay"),
            Some("{}"),
            None,
        )
        .await;
    assert_eq!(error_code(r).await, not_found);
    let missing = format!("/events/{}", hookgate::domain::EventId::generate());
    let r = app
        .admin(Method::GET, DEFAULT_TOKEN, &missing, None, None)
        .await;
    assert_eq!(
        error_code(r).await,
        not_found,
        "a missing event answers the same"
    );
    let list = app.admin_json(DEFAULT_TOKEN, "/events?source=stripe").await;
    assert_eq!(list["data"].as_array().unwrap().len(), 0, "{list}");
    let r = app
        .admin(
            Method::POST,
            DEFAULT_TOKEN,
            "/replay",
            Some(r#"{"source":"stripe"}"#),
            None,
        )
        .await;
    assert_eq!(r.status(), 202);
    let json: serde_json::Value = r.json().await.unwrap();
    assert_eq!(json["replayed"], 0, "{json}");
    for job in app.store.jobs_for_event(acme_event).await.unwrap() {
        let r = app
            .admin(
                Method::POST,
                DEFAULT_TOKEN,
                &format!("/dead-letters/{}/retry", job.id),
                None,
                None,
            )
            .await;
        assert_eq!(error_code(r).await, not_found);
        let r = app
            .admin(
                Method::DELETE,
                DEFAULT_TOKEN,
                &format!("/dead-letters/{}", job.id),
                None,
                None,
            )
            .await;
        assert_eq!(error_code(r).await, not_found);
    }

    // Nothing changed: the event still has exactly its two original pending jobs.
    let jobs = app.store.jobs_for_event(acme_event).await.unwrap();
    assert_eq!(jobs.len(), jobs_before);
    assert!(jobs
        .iter()
        .all(|j| j.status == hookgate::queue::JobStatus::Pending && j.attempts == 0));
    assert_eq!(app.store.count_events().await.unwrap(), 1);
    // And the right token still works.
    let r = app
        .admin(Method::GET, ACME_TOKEN, &event_path, None, None)
        .await;
    assert_eq!(r.status(), 200);
}
