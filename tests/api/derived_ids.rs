//! Providers that send no event id: a digest of the body makes a retried identical request a
//! duplicate (Postmark), while notify-then-fetch providers (Dropbox) make every request its own
//! event, so a second, identical notification of a new change is never dropped.

use crate::both_backends;
use crate::support::signing::hmac_sha256;
use crate::support::{spawn_app_with, Backend, TestApp};
use base64::Engine as _;
use hookgate::config::SourceSettings;

both_backends!(
    an_identical_postmark_retry_is_a_duplicate_of_its_digest,
    identical_dropbox_notifications_are_two_events
);

const DROPBOX_SECRET: &str = "dropbox-app-secret";
const POSTMARK_AUTH: &str = "hooks:postmark-password";

async fn spawn(backend: Backend) -> TestApp {
    let sources = [
        format!("name = \"dropbox\"\nprovider = \"dropbox\"\nsecrets = [\"{DROPBOX_SECRET}\"]"),
        format!("name = \"postmark\"\nprovider = \"postmark\"\nsecrets = [\"{POSTMARK_AUTH}\"]"),
    ];
    spawn_app_with(backend, move |settings, url| {
        settings.sources.extend(
            sources
                .iter()
                .map(|s| toml::from_str::<SourceSettings>(s).unwrap()),
        );
        url.to_owned()
    })
    .await
}

async fn post(
    app: &TestApp,
    source: &str,
    headers: &[(String, String)],
    body: &str,
) -> serde_json::Value {
    let r = app.post_webhook(source, headers, body.to_owned()).await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

async fn an_identical_postmark_retry_is_a_duplicate_of_its_digest(backend: Backend) {
    let app = spawn(backend).await;
    let auth = base64::engine::general_purpose::STANDARD.encode(POSTMARK_AUTH);
    let headers = vec![("Authorization".to_owned(), format!("Basic {auth}"))];
    let body = r#"{"RecordType":"Delivery","MessageID":"883953f4-6105-42a2-a16a-77a8eac79483","DeliveredAt":"2024-05-01T10:00:00Z"}"#;
    let first = post(&app, "postmark", &headers, body).await;
    let retry = post(&app, "postmark", &headers, body).await;
    assert_eq!(first["duplicate"], false);
    assert_eq!(retry["duplicate"], true);
    assert_eq!(first["id"], retry["id"]);
    let other = body.replace("10:00:00", "10:00:01");
    assert_eq!(
        post(&app, "postmark", &headers, &other).await["duplicate"],
        false
    );
    assert_eq!(app.store.count_events().await.unwrap(), 2);
    let event = app
        .admin_json(
            crate::support::DEFAULT_TOKEN,
            &format!("/events/{}", first["id"].as_str().unwrap()),
        )
        .await;
    use sha2::Digest as _;
    let digest = hex::encode(sha2::Sha256::digest(body.as_bytes()));
    assert_eq!(event["provider_event_id"], format!("sha256:{digest}"));
}

async fn identical_dropbox_notifications_are_two_events(backend: Backend) {
    let app = spawn(backend).await;
    let body = r#"{"list_folder":{"accounts":["dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc"]},"delta":{"users":[12345678]}}"#;
    let sig = hex::encode(hmac_sha256(DROPBOX_SECRET.as_bytes(), body.as_bytes()));
    let headers = vec![("X-Dropbox-Signature".to_owned(), sig)];
    let first = post(&app, "dropbox", &headers, body).await;
    let second = post(&app, "dropbox", &headers, body).await;
    assert_eq!(first["duplicate"], false);
    assert_eq!(second["duplicate"], false);
    assert_ne!(first["id"], second["id"]);
    assert_eq!(app.store.count_events().await.unwrap(), 2);
}
