//! Public keys and tokens under hostile input over HTTP: a Discord source (Ed25519 over the
//! timestamp and body) and a Microsoft Graph source (a clientState token in every element of
//! the body's `value` array). Each hostile request gets its exact error and stores nothing,
//! and a valid request right after is still accepted.

use crate::common::*;

both_backends!(
    discord_refuses_hostile_signatures,
    graph_refuses_hostile_batches,
);

/// The private key the Discord source's public key belongs to.
const DISCORD_SEED: [u8; 32] = [7; 32];
const GRAPH_STATE: &str = "graph-hostile-client-state";
/// Room for a body of 100,000 `value` elements.
const LARGE_BODY: usize = 8 * 1024 * 1024;
/// Under the default 32 KiB limit on a request's headers, with room for the others.
const LONG_HEADER: usize = 31 * 1024;

fn discord_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&DISCORD_SEED)
}

async fn spawn_key_schemes(backend: Backend) -> TestApp {
    let public = hex::encode(discord_key().verifying_key().to_bytes());
    spawn_app_with(backend, |settings, url| {
        *settings = Settings::from_toml_str(&format!(
            r#"{}{}
[[sources]]
name = "discord"
provider = "discord"
secrets = ["{public}"]
destinations = ["audit"]

[[sources]]
name = "graph"
provider = "microsoft-graph"
secrets = ["{GRAPH_STATE}"]
destinations = ["audit"]
"#,
            support::base_config(),
            extra_sources(),
        ))
        .expect("key scheme config");
        settings.server.max_body_bytes = LARGE_BODY;
        url.to_owned()
    })
    .await
}

fn discord_headers(signature: &str, ts: &str) -> Vec<(String, String)> {
    h(&[
        ("X-Signature-Ed25519", signature),
        ("X-Signature-Timestamp", ts),
        ("Content-Type", "application/json"),
    ])
}

fn discord_signed(ts: &str, body: &[u8]) -> Vec<(String, String)> {
    use ed25519_dalek::Signer as _;
    let sig = discord_key().sign(&cat(ts, body));
    discord_headers(&hex::encode(sig.to_bytes()), ts)
}

/// A Discord interaction is answered `{"type":5}` (deferred), not with the usual JSON.
async fn discord_accepted(app: &TestApp, case: &str, headers: &[(String, String)], body: String) {
    let before = app.store.count_events().await.unwrap();
    let r = app.post_webhook("discord", headers, body).await;
    assert_eq!(r.status(), 200, "{case}");
    assert_eq!(r.text().await.unwrap(), r#"{"type":5}"#, "{case}");
    assert_eq!(
        app.store.count_events().await.unwrap(),
        before + 1,
        "{case}"
    );
}

/// `{"value":[...]}` with `n` notifications, each carrying `state`.
fn graph_body(n: usize, state: &str) -> String {
    let item = format!(r#"{{"clientState":"{state}"}}"#);
    format!(r#"{{"value":[{}]}}"#, vec![item; n].join(","))
}

async fn discord_refuses_hostile_signatures(backend: Backend) {
    let app = spawn_key_schemes(backend).await;
    let invalid = (401, "invalid_signature");
    let ts = now().to_string();
    let body = r#"{"id":"1100000000000000001","type":2,"data":{"name":"ping"}}"#;
    let real = discord_signed(&ts, body.as_bytes())[0].1.clone();

    let cases = [
        // 1,000 entries, the real signature among them: one raw value, which is no hex.
        ("1,000 entries", format!("{real}{}", ",00".repeat(999))),
        ("non-hex signature", "zz".repeat(64)),
        (
            "non-hex character in a real one",
            format!("{}g", &real[..127]),
        ),
        ("31 KB signature header", "a".repeat(LONG_HEADER)),
        (
            "31 KB with the real signature first",
            format!("{real}{}", "0".repeat(LONG_HEADER - 128)),
        ),
        ("the real signature twice", format!("{real}{real}")),
    ];
    for (case, value) in cases {
        let headers = discord_headers(&value, &ts);
        refused(&app, case, "discord", &headers, body, invalid).await;
    }
    // A signature for another timestamp, and a timestamp of 31 KB.
    let moved = discord_headers(&real, &(now() + 1).to_string());
    refused(&app, "timestamp moved", "discord", &moved, body, invalid).await;
    let long_ts = discord_headers(&real, &"1".repeat(LONG_HEADER));
    refused(&app, "31 KB timestamp", "discord", &long_ts, body, invalid).await;

    // A body of 100,000 `value` elements: unsigned, refused for the signature; signed, read
    // once for its id (Discord reads no `*` pointer) and refused for lacking one.
    let huge = graph_body(100_000, "x");
    let garbage = discord_headers(&"ab".repeat(64), &ts);
    refused(
        &app,
        "100k elements, bad signature",
        "discord",
        &garbage,
        huge.clone(),
        invalid,
    )
    .await;
    let signed = discord_signed(&ts, huge.as_bytes());
    refused(
        &app,
        "100k elements, signed",
        "discord",
        &signed,
        huge,
        (400, "missing_event_id"),
    )
    .await;

    discord_accepted(
        &app,
        "valid after the hostile ones",
        &discord_signed(&ts, body.as_bytes()),
        body.to_owned(),
    )
    .await;
}

async fn graph_refuses_hostile_batches(backend: Backend) {
    let app = spawn_key_schemes(backend).await;
    let json = h(&[("Content-Type", "application/json")]);
    let invalid = (401, "invalid_signature");

    // 1,000 notifications, every one with the right clientState: more candidates than are
    // ever checked, refused before any comparison.
    refused(
        &app,
        "1,000 entries",
        "graph",
        &json,
        graph_body(1000, GRAPH_STATE),
        invalid,
    )
    .await;
    let wrong = [
        ("non-hex (wrong) clientState", "zz".repeat(32)),
        ("clientState with a prefix", format!("x{GRAPH_STATE}")),
        ("clientState upper-cased", GRAPH_STATE.to_uppercase()),
        ("31 KB clientState", "a".repeat(LONG_HEADER)),
    ];
    for (case, state) in wrong {
        refused(&app, case, "graph", &json, graph_body(1, &state), invalid).await;
    }
    // One wrong clientState among good ones spoils the batch.
    let mixed = graph_body(3, GRAPH_STATE).replacen(GRAPH_STATE, "other", 1);
    refused(
        &app,
        "one wrong among three",
        "graph",
        &json,
        mixed,
        invalid,
    )
    .await;
    // 100,000 elements: more than a `*` pointer may reach; the body is refused.
    refused(
        &app,
        "100k value elements",
        "graph",
        &json,
        graph_body(100_000, GRAPH_STATE),
        (400, "malformed_body"),
    )
    .await;

    let stored = accepted(
        &app,
        "valid after the hostile ones",
        "graph",
        &json,
        graph_body(2, GRAPH_STATE),
    )
    .await;
    // Graph sends no id: every notification is its own event.
    assert!(stored.provider_event_id.starts_with("random:"));
}
