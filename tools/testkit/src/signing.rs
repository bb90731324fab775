//! Signs test requests the way each provider does, independently of the code under test.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

pub fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

fn h(name: &str, value: String) -> (String, String) {
    (name.to_owned(), value)
}

pub fn stripe_headers(secret: &str, ts: i64, body: &[u8]) -> Vec<(String, String)> {
    let mut signed = format!("{ts}.").into_bytes();
    signed.extend_from_slice(body);
    let sig = hex::encode(hmac_sha256(secret.as_bytes(), &signed));
    vec![
        h("Stripe-Signature", format!("t={ts},v1={sig}")),
        h("Content-Type", "application/json".into()),
    ]
}

pub fn github_headers(secret: &str, delivery: &str, body: &[u8]) -> Vec<(String, String)> {
    let sig = hex::encode(hmac_sha256(secret.as_bytes(), body));
    vec![
        h("X-Hub-Signature-256", format!("sha256={sig}")),
        h("X-GitHub-Delivery", delivery.into()),
        h("X-GitHub-Event", "push".into()),
        h("Content-Type", "application/octet-stream".into()),
    ]
}

pub fn slack_headers(secret: &str, ts: i64, body: &[u8]) -> Vec<(String, String)> {
    let mut signed = format!("v0:{ts}:").into_bytes();
    signed.extend_from_slice(body);
    let sig = hex::encode(hmac_sha256(secret.as_bytes(), &signed));
    vec![
        h("X-Slack-Signature", format!("v0={sig}")),
        h("X-Slack-Request-Timestamp", ts.to_string()),
        h("Content-Type", "application/json".into()),
    ]
}

pub fn svix_headers(secret: &str, id: &str, ts: i64, body: &[u8]) -> Vec<(String, String)> {
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap();
    let mut signed = format!("{id}.{ts}.").into_bytes();
    signed.extend_from_slice(body);
    let sig = base64::engine::general_purpose::STANDARD.encode(hmac_sha256(&key, &signed));
    vec![
        h("svix-id", id.into()),
        h("svix-timestamp", ts.to_string()),
        h("svix-signature", format!("v1,{sig}")),
        h("Content-Type", "application/json".into()),
    ]
}
