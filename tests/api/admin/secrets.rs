//! Which of a source's secrets verified an event shows in the admin API's event views, so
//! an operator rotating secrets can see when the old one is no longer used.

use crate::both_backends;
use crate::support::signing::{now, stripe_headers};
use crate::support::{spawn_app, Backend, TestApp, ACME_TOKEN, STRIPE_OLD_SECRET, STRIPE_SECRET};

both_backends!(the_verifying_secret_shows_in_the_event_views);

async fn post(app: &TestApp, secret: &str, id: &str) -> String {
    let body = format!(r#"{{"id":"{id}","type":"invoice.paid"}}"#);
    let headers = stripe_headers(secret, now(), body.as_bytes());
    let r = app.post_webhook("stripe", &headers, body).await;
    assert_eq!(r.status(), 200);
    let json: serde_json::Value = r.json().await.unwrap();
    json["id"].as_str().unwrap().to_owned()
}

async fn the_verifying_secret_shows_in_the_event_views(backend: Backend) {
    let app = spawn_app(backend).await;
    // The source lists the current secret first, the old one second.
    let current = post(&app, STRIPE_SECRET, "evt_current_secret").await;
    let old = post(&app, STRIPE_OLD_SECRET, "evt_old_secret").await;
    for (id, index) in [(&current, 0), (&old, 1)] {
        let e = app.admin_json(ACME_TOKEN, &format!("/events/{id}")).await;
        assert_eq!(e["verified_secret_index"], index, "{e}");
    }
    let list = app.admin_json(ACME_TOKEN, "/events?source=stripe").await;
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 2, "{list}");
    for e in data {
        let want = if e["id"] == old.as_str() { 1 } else { 0 };
        assert_eq!(e["verified_secret_index"], want, "{e}");
    }
}
