//! No secret, token, signature or body reaches the logs, at any level: a full ingest,
//! delivery and admin run is captured at TRACE and searched, once per store, each store its
//! own test case.

use hookgate_testkit as support;
use hookgate_testkit::both_backends;

use std::io::Write;
use std::sync::{Arc, LazyLock, Mutex};

use reqwest::Method;
use support::sink::Sink;
use support::{spawn_app_with_sink, Backend, ACME_TOKEN, STRIPE_OLD_SECRET, STRIPE_SECRET};

both_backends!(no_secret_token_signature_or_body_is_logged);

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

/// The process's log output. A subscriber is global to the process, so it is installed once
/// (the JSON format, as `--log-format json` installs it) and the stores' runs take turns
/// (`TURN`), each reading only what was logged during its own turn.
static CAPTURED: LazyLock<Captured> = LazyLock::new(|| {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .json()
        .with_env_filter("trace")
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .init();
    captured
});
static TURN: LazyLock<tokio::sync::Mutex<()>> = LazyLock::new(Default::default);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const RECONCILE_API_KEY: &str = "sk_test_logs_reconcile_key_4eC39HqLyjWDarjtT1zdp7dc";

const BODY_MARKER: &str = "body-marker-7f3a9c21-never-log-me";

async fn full_run(backend: Backend) -> Vec<String> {
    let sink = Sink::start().await;
    // One failed attempt, whose log line must say why.
    sink.script("/audit", &[support::sink::Answer::status(503)]);
    // Reconciliation against a fake Stripe API: its credential must not be logged either.
    let fake = support::fake_providers::FakeProviders::start(RECONCILE_API_KEY).await;
    let api_base = fake.base.clone();
    let app = spawn_app_with_sink(backend, &sink, |settings| {
        settings.sources[0].reconcile = Some(
            toml::from_str(&format!(
                "api_key = \"{RECONCILE_API_KEY}\"\napi_base = \"{api_base}\""
            ))
            .unwrap(),
        );
    })
    .await;
    let body =
        format!(r#"{{"id":"evt_logs","type":"invoice.paid","secret_note":"{BODY_MARKER}"}}"#);
    let headers =
        support::signing::stripe_headers(STRIPE_SECRET, support::signing::now(), body.as_bytes());
    let signature = headers[0].1.clone();
    assert_eq!(
        app.post_webhook("stripe", &headers, body.clone())
            .await
            .status(),
        200
    );
    // A forged request and a bad admin token exercise the rejection paths too.
    let forged = support::signing::stripe_headers(STRIPE_OLD_SECRET, 1, body.as_bytes());
    assert_eq!(
        app.post_webhook("stripe", &forged, body.clone())
            .await
            .status(),
        401
    );
    app.worker().run_once().await.unwrap();
    let delivered = sink.received("/billing").pop().expect("delivered");
    let events = app.admin_json(ACME_TOKEN, "/events").await;
    let id = events["data"][0]["id"].as_str().unwrap().to_owned();
    app.admin_json(ACME_TOKEN, &format!("/events/{id}")).await;
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/events/{id}/replay"),
            None,
            Some("log-key"),
        )
        .await;
    assert_eq!(r.status(), 202);
    let r = app
        .admin(
            Method::GET,
            "hg_wrong_token_for_logs",
            "/events",
            None,
            None,
        )
        .await;
    assert_eq!(r.status(), 401);
    // One reconciliation that recovers an event, one whose call fails.
    fake.add_stripe_event("evt_logs_recovered", "invoice.paid");
    for fail in [false, true] {
        if fail {
            fake.fail_request(
                1,
                support::fake_providers::Failure {
                    status: 500,
                    retry_after: None,
                },
            );
        }
        let r = app
            .admin(
                Method::POST,
                ACME_TOKEN,
                "/sources/stripe/reconciliations",
                None,
                None,
            )
            .await;
        let run: serde_json::Value = r.json().await.unwrap();
        assert_eq!(run["errors"], i64::from(fail), "{run}");
        assert!(!run.to_string().contains(RECONCILE_API_KEY));
    }
    assert!(fake.requests()[0].headers["authorization"].contains(RECONCILE_API_KEY));
    assert!(!format!("{:?}", app.config).contains(RECONCILE_API_KEY));
    // The MACs themselves: Stripe's hex after "v1=", the forward's base64 after "v1,".
    vec![
        signature.split("v1=").nth(1).unwrap().to_owned(),
        delivered.header("webhook-signature")["v1,".len()..].to_owned(),
        BODY_MARKER.to_owned(),
    ]
}

async fn no_secret_token_signature_or_body_is_logged(backend: Backend) {
    let _turn = TURN.lock().await;
    let captured = &*CAPTURED;
    captured.0.lock().unwrap().clear();

    let mut needles: Vec<String> = vec![
        STRIPE_SECRET.into(),
        STRIPE_OLD_SECRET.into(),
        support::GITHUB_SECRET.into(),
        support::SVIX_SECRET.into(),
        ACME_TOKEN.into(),
        support::DEFAULT_TOKEN.into(),
        "hg_wrong_token_for_logs".into(),
        RECONCILE_API_KEY.into(),
        // The destinations' signing secrets, as configured.
        "dGVzdC1iaWxsaW5nLXNpZ25pbmcta2V5".into(),
        "dGVzdC1hdWRpdC1zaWduaW5nLWtleQ".into(),
    ];
    needles.extend(full_run(backend).await);

    let logs = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    assert!(
        logs.len() > 10_000,
        "the run was logged at trace level ({} bytes)",
        logs.len()
    );
    // One JSON line per request and per delivery attempt, with the fields operators filter on.
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let with_message = |m: &str| -> Vec<&serde_json::Value> {
        lines
            .iter()
            .filter(|l| l["fields"]["message"] == m)
            .collect()
    };
    assert_eq!(with_message("reconciliation run finished").len(), 2);
    assert_eq!(with_message("reconciliation call failed").len(), 1);
    let accepted = with_message("webhook accepted");
    assert_eq!(accepted.len(), 1, "one for this store's run");
    for l in &accepted {
        let f = &l["fields"];
        assert_eq!(f["source"], "stripe");
        assert_eq!(f["outcome"], "accepted");
        assert_eq!(f["provider_event_id"], "evt_logs");
        assert_eq!(f["event_id"].as_str().unwrap().len(), 36);
        assert_eq!(l["level"], "INFO");
        assert!(l["timestamp"].is_string());
    }
    let rejected = with_message("webhook rejected");
    assert!(rejected
        .iter()
        .any(|l| l["fields"]["reason"] == "timestamp_out_of_tolerance"
            || l["fields"]["reason"] == "invalid_signature"));
    let attempts = with_message("delivery attempt");
    assert!(attempts.len() >= 2, "billing and audit");
    for l in &attempts {
        let f = &l["fields"];
        assert!(f["event_id"].is_string() && f["destination"].is_string());
        assert_eq!(f["source"], "stripe");
        assert!(f["outcome"].is_string());
        if f["outcome"] == "succeeded" {
            assert!(f.get("reason").is_none(), "{l}");
        }
    }
    let retried: Vec<_> = attempts
        .iter()
        .filter(|l| l["fields"]["outcome"] == "retry")
        .collect();
    assert_eq!(retried.len(), 1, "audit's scripted 503");
    for l in retried {
        assert_eq!(l["fields"]["reason"], "HTTP 503", "{l}");
        assert_eq!(l["fields"]["status"], 503, "{l}");
    }
    for needle in &needles {
        assert!(needle.len() >= 16, "{needle:?} is too short to search for");
        if let Some(at) = logs.find(needle) {
            let start = logs[..at].rfind('\n').map_or(0, |i| i + 1);
            let end = logs[at..].find('\n').map_or(logs.len(), |i| at + i);
            panic!("{needle:?} appears in the logs:\n{}", &logs[start..end]);
        }
    }
}

#[test]
fn debug_output_of_the_configuration_redacts_secrets() {
    let settings = hookgate::config::Settings::from_toml_str(&support::base_config()).unwrap();
    let config = hookgate::config::GatewayConfig::from_settings(&settings).unwrap();
    for text in [format!("{settings:?}"), format!("{config:?}")] {
        for secret in [
            STRIPE_SECRET,
            STRIPE_OLD_SECRET,
            support::SLACK_SECRET,
            "dGVzdC1iaWxsaW5nLXNpZ25pbmcta2V5",
        ] {
            assert!(!text.contains(secret), "{secret} in Debug output");
        }
        assert!(text.contains("stripe"), "the rest is still shown");
    }
}
