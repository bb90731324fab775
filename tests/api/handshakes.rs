//! Provider handshakes over real HTTP: each is answered exactly as its provider expects and
//! never stored; the methods a webhook URL takes; and the answers providers need to
//! accepted events (Discord's deferred interaction, Twilio's TwiML). Every request here is
//! signed independently of the code under test, except Twilio's, which `sign_request` signs.

use ed25519_dalek::Signer as _;
use reqwest::Method;

use crate::both_backends;
use crate::support::signing::{self, hmac_sha256, slack_headers};
use crate::support::{error_code, spawn_app_with, Backend, TestApp, SLACK_SECRET};
use hookgate::config::SourceSettings;

both_backends!(
    slack_url_verification_is_answered_with_the_challenge_as_json,
    zoom_url_validation_is_answered_with_the_hmac_of_the_plain_token,
    twitch_callback_verification_is_answered_with_the_raw_challenge,
    discord_ping_is_answered_with_a_pong,
    dropbox_get_challenge_is_echoed_as_text,
    meta_subscribe_is_answered_only_with_the_right_verify_token,
    graph_validation_token_is_answered_url_decoded,
    signed_handshakes_with_bad_signatures_are_refused_unanswered,
    webhook_urls_answer_only_their_methods,
    gets_that_are_no_handshake_and_overlong_challenges_are_refused,
    discord_interactions_are_stored_and_answered_deferred,
    concurrent_discord_interactions_are_each_judged_by_their_own_signature,
    twilio_events_are_answered_with_twiml,
);

const ZOOM_SECRET: &str = "zoom-secret-token-4f1b9c";
const TWITCH_SECRET: &str = "twitch-subscription-secret";
const DROPBOX_SECRET: &str = "dropbox-app-secret";
const META_SECRET: &str = "meta-app-secret";
const META_VERIFY_TOKEN: &str = "meta-verify-token-81c2";
const GRAPH_CLIENT_STATE: &str = "graph-client-state";
const TWILIO_TOKEN: &str = "twilio-auth-token";
const TWILIO_URL: &str = "https://hooks.example.com/webhooks/twilio";
/// The Ed25519 seed of the Discord application; the source holds its public key.
const DISCORD_SEED: [u8; 32] = [42; 32];
const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";

fn source(toml: &str) -> SourceSettings {
    toml::from_str(toml).unwrap_or_else(|e| panic!("test source {toml}: {e}"))
}

/// The base app plus one source per provider with a handshake or an answer of its own.
async fn spawn(backend: Backend) -> TestApp {
    let discord_key = hex::encode(
        ed25519_dalek::SigningKey::from_bytes(&DISCORD_SEED)
            .verifying_key()
            .to_bytes(),
    );
    let sources = [
        format!(
            r#"name = "zoom"
provider = "zoom"
secrets = ["{ZOOM_SECRET}"]"#
        ),
        format!(
            r#"name = "twitch"
provider = "twitch"
secrets = ["{TWITCH_SECRET}"]"#
        ),
        format!(
            r#"name = "discord"
provider = "discord"
secrets = ["{discord_key}"]"#
        ),
        format!(
            r#"name = "dropbox"
provider = "dropbox"
secrets = ["{DROPBOX_SECRET}"]"#
        ),
        format!(
            r#"name = "meta"
provider = "meta"
secrets = ["{META_SECRET}"]
verify_token = "{META_VERIFY_TOKEN}""#
        ),
        format!(
            r#"name = "graph"
provider = "microsoft-graph"
secrets = ["{GRAPH_CLIENT_STATE}"]"#
        ),
        format!(
            r#"name = "twilio"
provider = "twilio"
secrets = ["{TWILIO_TOKEN}"]
public_url = "{TWILIO_URL}""#
        ),
    ];
    spawn_app_with(backend, move |settings, url| {
        settings.sources.extend(sources.iter().map(|s| source(s)));
        url.to_owned()
    })
    .await
}

/// Asserts a handshake answer: 200, the content type, `nosniff`, and exactly `body`.
async fn assert_answer(r: reqwest::Response, content_type: &str, body: &str) {
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], content_type);
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert_eq!(r.text().await.unwrap(), body);
}

async fn assert_nothing_stored(app: &TestApp) {
    assert_eq!(
        app.store.count_events().await.unwrap(),
        0,
        "a handshake was stored"
    );
}

fn zoom_headers(secret: &str, ts: i64, body: &str) -> Vec<(String, String)> {
    let sig = hex::encode(hmac_sha256(
        secret.as_bytes(),
        format!("v0:{ts}:{body}").as_bytes(),
    ));
    vec![
        ("x-zm-signature".into(), format!("v0={sig}")),
        ("x-zm-request-timestamp".into(), ts.to_string()),
        ("Content-Type".into(), JSON.into()),
    ]
}

fn twitch_headers(secret: &str, message_type: &str, id: &str, body: &str) -> Vec<(String, String)> {
    // Twitch sends RFC 3339 with nanoseconds, and signs the text as sent.
    let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let sig = hex::encode(hmac_sha256(
        secret.as_bytes(),
        format!("{id}{ts}{body}").as_bytes(),
    ));
    vec![
        ("Twitch-Eventsub-Message-Id".into(), id.into()),
        ("Twitch-Eventsub-Message-Timestamp".into(), ts),
        (
            "Twitch-Eventsub-Message-Signature".into(),
            format!("sha256={sig}"),
        ),
        ("Twitch-Eventsub-Message-Type".into(), message_type.into()),
        (
            "Twitch-Eventsub-Subscription-Type".into(),
            "channel.follow".into(),
        ),
        ("Content-Type".into(), JSON.into()),
    ]
}

fn discord_headers(seed: &[u8; 32], body: &str) -> Vec<(String, String)> {
    let ts = signing::now().to_string();
    let key = ed25519_dalek::SigningKey::from_bytes(seed);
    let sig = key.sign(format!("{ts}{body}").as_bytes());
    vec![
        ("X-Signature-Ed25519".into(), hex::encode(sig.to_bytes())),
        ("X-Signature-Timestamp".into(), ts),
        ("Content-Type".into(), JSON.into()),
    ]
}

async fn request(app: &TestApp, method: Method, path_and_query: &str) -> reqwest::Response {
    app.client
        .request(method, app.url(path_and_query))
        .send()
        .await
        .expect("request is sent")
}

async fn slack_url_verification_is_answered_with_the_challenge_as_json(backend: Backend) {
    let app = spawn(backend).await;
    let challenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P";
    let body = format!(
        r#"{{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"{challenge}","type":"url_verification"}}"#
    );
    let headers = slack_headers(SLACK_SECRET, signing::now(), body.as_bytes());
    let r = app.post_webhook("slack", &headers, body).await;
    assert_answer(r, JSON, &format!(r#"{{"challenge":"{challenge}"}}"#)).await;
    assert_nothing_stored(&app).await;
}

async fn zoom_url_validation_is_answered_with_the_hmac_of_the_plain_token(backend: Backend) {
    let app = spawn(backend).await;
    let plain = "qgg8vlvZRS6UYooatFL8Aw";
    let body = format!(
        r#"{{"payload":{{"plainToken":"{plain}"}},"event_ts":1654503849680,"event":"endpoint.url_validation"}}"#
    );
    let headers = zoom_headers(ZOOM_SECRET, signing::now(), &body);
    let r = app.post_webhook("zoom", &headers, body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], JSON);
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    // Computed here, as Zoom's sample code does: hex HMAC-SHA256(secret token, plainToken).
    let encrypted = hex::encode(hmac_sha256(ZOOM_SECRET.as_bytes(), plain.as_bytes()));
    let answer: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"plainToken": plain, "encryptedToken": encrypted})
    );
    assert_nothing_stored(&app).await;
}

async fn twitch_callback_verification_is_answered_with_the_raw_challenge(backend: Backend) {
    let app = spawn(backend).await;
    let challenge = "pogchamp-kappa-360noscope-vohiyo";
    let body = format!(
        r#"{{"challenge":"{challenge}","subscription":{{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","status":"webhook_callback_verification_pending","type":"channel.follow","version":"2"}}}}"#
    );
    let headers = twitch_headers(
        TWITCH_SECRET,
        "webhook_callback_verification",
        "e76c6bd4-55c9-4987-8304-da1588d8988b",
        &body,
    );
    let r = app.post_webhook("twitch", &headers, body).await;
    assert_answer(r, TEXT, challenge).await;
    assert_nothing_stored(&app).await;
}

async fn discord_ping_is_answered_with_a_pong(backend: Backend) {
    let app = spawn(backend).await;
    let body = r#"{"id":"1138479283012345678","application_id":"1138479283000000000","type":1,"version":1}"#;
    let r = app
        .post_webhook("discord", &discord_headers(&DISCORD_SEED, body), body)
        .await;
    assert_answer(r, JSON, r#"{"type":1}"#).await;
    assert_nothing_stored(&app).await;
}

async fn dropbox_get_challenge_is_echoed_as_text(backend: Backend) {
    let app = spawn(backend).await;
    let r = request(
        &app,
        Method::GET,
        "/webhooks/dropbox?challenge=Dropbox-5a3f1e",
    )
    .await;
    assert_answer(r, TEXT, "Dropbox-5a3f1e").await;
    // What anyone echoes back is text, never markup a browser would render.
    let r = request(
        &app,
        Method::GET,
        "/webhooks/dropbox?challenge=%3Cscript%3E",
    )
    .await;
    assert_answer(r, TEXT, "<script>").await;
    assert_nothing_stored(&app).await;
}

async fn meta_subscribe_is_answered_only_with_the_right_verify_token(backend: Backend) {
    let app = spawn(backend).await;
    let subscribe = |token: &str| {
        format!(
            "/webhooks/meta?hub.mode=subscribe&hub.verify_token={token}&hub.challenge=1158201444"
        )
    };
    let r = request(&app, Method::GET, &subscribe(META_VERIFY_TOKEN)).await;
    assert_answer(r, TEXT, "1158201444").await;

    for wrong in ["meta-verify-token-81c3", ""] {
        let r = request(&app, Method::GET, &subscribe(wrong)).await;
        assert_eq!(
            error_code(r).await,
            (403, "invalid_verify_token".into()),
            "{wrong:?}"
        );
    }
    let r = request(
        &app,
        Method::GET,
        "/webhooks/meta?hub.mode=subscribe&hub.challenge=1",
    )
    .await;
    assert_eq!(error_code(r).await, (403, "invalid_verify_token".into()));
    // Only the subscribe mode is a handshake.
    let r = request(
        &app,
        Method::GET,
        &format!("/webhooks/meta?hub.mode=unsubscribe&hub.verify_token={META_VERIFY_TOKEN}&hub.challenge=1"),
    )
    .await;
    assert_eq!(error_code(r).await, (400, "unknown_handshake".into()));
    assert_nothing_stored(&app).await;
}

async fn graph_validation_token_is_answered_url_decoded(backend: Backend) {
    let app = spawn(backend).await;
    // Graph POSTs the token in the query with an empty body and expects it back decoded.
    let r = app
        .client
        .post(app.url(
            "/webhooks/graph?validationToken=Validation%3A%20Testing%20client%20application%20reachability%20for%20subscription%20Request-Id%3A%2025a3d5d8-7a1c-4b8e-9f52-2d0c0e6c1b7e",
        ))
        .header("Content-Type", "text/plain; charset=utf-8")
        .send()
        .await
        .unwrap();
    assert_answer(
        r,
        TEXT,
        "Validation: Testing client application reachability for subscription Request-Id: 25a3d5d8-7a1c-4b8e-9f52-2d0c0e6c1b7e",
    )
    .await;
    assert_nothing_stored(&app).await;
}

async fn signed_handshakes_with_bad_signatures_are_refused_unanswered(backend: Backend) {
    let app = spawn(backend).await;
    let refused = |r: reqwest::Response, secret_word: &'static str| async move {
        assert_eq!(r.status(), 401);
        let text = r.text().await.unwrap();
        assert!(!text.contains(secret_word), "answered anyway: {text}");
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["error"]["code"], "invalid_signature", "{text}");
    };

    let body = r#"{"token":"t","challenge":"slack-challenge-x","type":"url_verification"}"#;
    let headers = slack_headers("not-the-slack-secret", signing::now(), body.as_bytes());
    refused(
        app.post_webhook("slack", &headers, body).await,
        "slack-challenge-x",
    )
    .await;

    let body = r#"{"payload":{"plainToken":"zoom-plain-x"},"event":"endpoint.url_validation"}"#;
    let headers = zoom_headers("not-the-zoom-secret", signing::now(), body);
    refused(
        app.post_webhook("zoom", &headers, body).await,
        "zoom-plain-x",
    )
    .await;

    let body = r#"{"challenge":"twitch-challenge-x"}"#;
    let headers = twitch_headers(
        "not-the-twitch-secret",
        "webhook_callback_verification",
        "m-1",
        body,
    );
    refused(
        app.post_webhook("twitch", &headers, body).await,
        "twitch-challenge-x",
    )
    .await;

    // Discord probes exactly this: a PING signed by another key must get 401.
    let body = r#"{"id":"1","application_id":"2","type":1}"#;
    let headers = discord_headers(&[9; 32], body);
    refused(
        app.post_webhook("discord", &headers, body).await,
        r#""type":1"#,
    )
    .await;

    // A valid signature over a different body does not carry over to a tampered one.
    let signed = r#"{"id":"1","application_id":"2","type":2}"#;
    let headers = discord_headers(&DISCORD_SEED, signed);
    refused(
        app.post_webhook("discord", &headers, body).await,
        r#""type":1"#,
    )
    .await;

    let r = app.post_webhook("discord", &[], body).await;
    assert_eq!(error_code(r).await, (401, "missing_signature".into()));
    assert_nothing_stored(&app).await;
}

async fn webhook_urls_answer_only_their_methods(backend: Backend) {
    let app = spawn(backend).await;
    // Providers without a GET handshake: POST only, whatever the query says.
    for path in [
        "/webhooks/stripe",
        "/webhooks/stripe?challenge=x",
        "/webhooks/graph?validationToken=x",
        "/webhooks/not-a-source",
    ] {
        let r = request(&app, Method::GET, path).await;
        assert_eq!(r.headers()["allow"], "POST", "{path}");
        assert_eq!(
            error_code(r).await,
            (405, "method_not_allowed".into()),
            "{path}"
        );
    }
    // Dropbox and Meta answer GET as well, and nothing else.
    for (method, path) in [
        (Method::PUT, "/webhooks/dropbox?challenge=x"),
        (Method::DELETE, "/webhooks/dropbox"),
        (Method::PATCH, "/webhooks/meta"),
    ] {
        let r = request(&app, method.clone(), path).await;
        assert_eq!(r.headers()["allow"], "GET, POST", "{method} {path}");
        assert_eq!(
            error_code(r).await,
            (405, "method_not_allowed".into()),
            "{method} {path}"
        );
    }
    assert_nothing_stored(&app).await;
}

async fn gets_that_are_no_handshake_and_overlong_challenges_are_refused(backend: Backend) {
    let app = spawn(backend).await;
    for path in [
        "/webhooks/dropbox",
        "/webhooks/dropbox?challenge=",
        "/webhooks/dropbox?other=x",
        "/webhooks/meta",
    ] {
        let r = request(&app, Method::GET, path).await;
        assert_eq!(
            error_code(r).await,
            (400, "unknown_handshake".into()),
            "{path}"
        );
    }
    // A challenge is a short token; echoing an arbitrary long one would make the URL a
    // reflector. 4 KiB is the cap, so exactly 4096 bytes still pass.
    let long = "c".repeat(5000);
    let r = request(
        &app,
        Method::GET,
        &format!("/webhooks/dropbox?challenge={long}"),
    )
    .await;
    assert_eq!(error_code(r).await, (400, "invalid_handshake".into()));
    let r = app
        .client
        .post(app.url(&format!("/webhooks/graph?validationToken={long}")))
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(r).await, (400, "invalid_handshake".into()));
    let edge = "e".repeat(4096);
    let r = request(
        &app,
        Method::GET,
        &format!("/webhooks/dropbox?challenge={edge}"),
    )
    .await;
    assert_answer(r, TEXT, &edge).await;
    assert_nothing_stored(&app).await;
}

async fn discord_interactions_are_stored_and_answered_deferred(backend: Backend) {
    let app = spawn(backend).await;
    let body = r#"{"id":"1138479283099999999","application_id":"1138479283000000000","type":2,"data":{"name":"ping"},"token":"interaction-token"}"#;

    let first = app
        .post_webhook("discord", &discord_headers(&DISCORD_SEED, body), body)
        .await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["content-type"], JSON);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let id = first.headers()["hookgate-event-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(first.text().await.unwrap(), r#"{"type":5}"#);

    let event = app
        .store
        .get_event(hookgate::domain::EventId::parse(&id).unwrap())
        .await
        .unwrap()
        .expect("the interaction is stored under the id in Hookgate-Event-Id");
    assert_eq!(event.source, "discord");
    assert_eq!(event.provider_event_id, "1138479283099999999");
    assert_eq!(event.event_type.as_deref(), Some("2"));
    assert_eq!(event.verified_scheme, "discord");
    assert_eq!(event.body, body.as_bytes());

    // A retry (signed again) is the same event, answered the same way.
    let retry = app
        .post_webhook("discord", &discord_headers(&DISCORD_SEED, body), body)
        .await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["content-type"], JSON);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.headers()["hookgate-event-id"], id.as_str());
    assert_eq!(retry.text().await.unwrap(), r#"{"type":5}"#);
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

/// Ed25519 signatures of concurrent requests are checked in batches: a bad one among them
/// fails its own request only.
async fn concurrent_discord_interactions_are_each_judged_by_their_own_signature(backend: Backend) {
    let app = std::sync::Arc::new(spawn(backend).await);
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(40));
    let tasks: Vec<_> = (0..40u32)
        .map(|n| {
            let (app, barrier) = (app.clone(), barrier.clone());
            tokio::spawn(async move {
                let body =
                    format!(r#"{{"id":"11384792830{n:08}","type":2,"data":{{"name":"ping"}}}}"#);
                // Every fourth is signed by another application's key.
                let seed = if n % 4 == 3 { [9; 32] } else { DISCORD_SEED };
                let headers = discord_headers(&seed, &body);
                barrier.wait().await;
                let r = app.post_webhook("discord", &headers, body).await;
                let answer = if r.status() == 200 {
                    (200, String::new())
                } else {
                    error_code(r).await
                };
                (n, answer)
            })
        })
        .collect();
    for task in tasks {
        let (n, answer) = task.await.unwrap();
        let expected = if n % 4 == 3 {
            (401, "invalid_signature".to_owned())
        } else {
            (200, String::new())
        };
        assert_eq!(answer, expected, "interaction {n}");
    }
    assert_eq!(app.store.count_events().await.unwrap(), 30);
}

async fn twilio_events_are_answered_with_twiml(backend: Backend) {
    let app = spawn(backend).await;
    let verifier = &app
        .config
        .sources
        .get("twilio")
        .expect("twilio source")
        .verifier;
    let body = br#"{"MessageSid":"SM0f1e2d3c4b5a69788796a5b4c3d2e1f0","Body":"hello"}"#.to_vec();
    let signed = hookgate::verify::sign_request(
        verifier,
        body.clone(),
        "twilio-idem-7f3a",
        "message",
        signing::now(),
    )
    .expect("a Twilio request signs with public_url set");
    // Twilio signs the URL with bodySHA256 in it, so the query must be sent as signed.
    assert!(signed.query.starts_with("bodySHA256="), "{}", signed.query);
    let headers: Vec<(String, String)> = signed
        .headers
        .iter()
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect();
    let post = |query: String| {
        let mut req = app
            .client
            .post(app.url(&format!("/webhooks/twilio?{query}")));
        for (n, v) in &headers {
            req = req.header(n, v);
        }
        req.body(signed.body.clone()).send()
    };

    let r = post(signed.query.clone()).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/xml");
    let id = r.headers()["hookgate-event-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(r.text().await.unwrap(), "<Response/>");
    let event = app
        .store
        .get_event(hookgate::domain::EventId::parse(&id).unwrap())
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(event.provider_event_id, "twilio-idem-7f3a");
    assert_eq!(event.verified_scheme, "twilio");
    assert_eq!(event.body, signed.body);

    // Without the signed query the URL differs: refused.
    let r = post(String::new()).await.unwrap();
    assert_eq!(error_code(r).await, (401, "invalid_signature".into()));
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}
