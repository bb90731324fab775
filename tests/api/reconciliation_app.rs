//! Reconciling a GitHub App's own webhook (`app = true`): every call carries a JWT signed
//! with the App's private key, which the fake checks against the App's public key.

use reqwest::Method;
use serde_json::Value;

use crate::both_backends;
use crate::support::fake_providers::FakeProviders;
use crate::support::github_app::{check_jwt, public_key, APP_PRIVATE_KEY, OTHER_PRIVATE_KEY};
use crate::support::sink::Sink;
use crate::support::{
    signing, spawn_app_with_sink, Backend, TestApp, DEFAULT_TOKEN, GITHUB_SECRET,
};

both_backends!(
    an_apps_missing_deliveries_are_redelivered_with_a_signed_jwt,
    a_wrong_private_key_gets_the_run_recorded_with_an_error,
);

const APP_ID: u64 = 424242;

async fn app_with_key(backend: Backend, sink: &Sink, fake: &FakeProviders, pem: &str) -> TestApp {
    let text = format!(
        "api_key = {pem:?}\napi_base = \"{}\"\napp = true\napp_id = {APP_ID}\n",
        fake.base
    );
    let reconcile: hookgate::config::ReconcileSettings = toml::from_str(&text).unwrap();
    spawn_app_with_sink(backend, sink, |settings| {
        for s in &mut settings.sources {
            if s.name == "github" {
                s.reconcile = Some(reconcile.clone());
            }
        }
    })
    .await
}

async fn run(app: &TestApp) -> Value {
    let r = app
        .admin(
            Method::POST,
            DEFAULT_TOKEN,
            "/sources/github/reconciliations",
            None,
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

fn counts(run: &Value) -> [i64; 4] {
    ["listed", "missing", "recovered", "errors"].map(|k| run[k].as_i64().unwrap())
}

async fn an_apps_missing_deliveries_are_redelivered_with_a_signed_jwt(backend: Backend) {
    let sink = Sink::start().await;
    let fake = FakeProviders::start("unused-for-the-app").await;
    fake.accept_github_app(APP_ID, APP_PRIVATE_KEY);
    fake.set_page_size(2);
    let app = app_with_key(backend, &sink, &fake, APP_PRIVATE_KEY).await;
    let body = br#"{"zen":"Keep it logically awesome."}"#;
    let headers = signing::github_headers(GITHUB_SECRET, "guid-stored", body);
    let r = app.post_webhook("github", &headers, &body[..]).await;
    assert_eq!(r.status(), 200);
    fake.add_github_delivery(1, "guid-stored");
    fake.add_github_delivery(2, "guid-lost-a");
    fake.add_github_delivery(3, "guid-lost-b");

    let record = run(&app).await;
    assert_eq!(counts(&record), [3, 2, 2, 0], "{record}");
    assert_eq!(record["pages"], 2);
    assert_eq!(
        fake.posts(),
        [
            "/app/hook/deliveries/3/attempts",
            "/app/hook/deliveries/2/attempts"
        ],
        "one redelivery per missing guid, none for the stored one"
    );
    let requests = fake.requests();
    let listings: Vec<_> = requests.iter().filter(|r| r.method == "GET").collect();
    assert_eq!(listings[0].path, "/app/hook/deliveries");
    assert_eq!(listings[0].query["per_page"], "100");
    assert_eq!(listings[1].query["cursor"], "v1_2");
    let public = public_key(APP_PRIVATE_KEY);
    let now = chrono::Utc::now().timestamp();
    for r in &requests {
        let auth = r.headers.get("authorization").map(String::as_str);
        check_jwt(auth, APP_ID, &public, now).unwrap();
        assert!(!auth.unwrap().contains("PRIVATE"));
        assert_eq!(r.headers["accept"], "application/vnd.github+json");
    }
}

async fn a_wrong_private_key_gets_the_run_recorded_with_an_error(backend: Backend) {
    let sink = Sink::start().await;
    let fake = FakeProviders::start("unused-for-the-app").await;
    fake.accept_github_app(APP_ID, APP_PRIVATE_KEY);
    fake.add_github_delivery(1, "guid-lost");
    let app = app_with_key(backend, &sink, &fake, OTHER_PRIVATE_KEY).await;
    let record = run(&app).await;
    assert_eq!(counts(&record), [0, 0, 0, 1], "{record}");
    assert!(
        record["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("401"),
        "{record}"
    );
    assert!(fake.posts().is_empty());
}
