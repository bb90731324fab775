//! `GET /admin/v1/sources` shows each of the tenant's sources with where its dedupe id comes
//! from (the definition's locations, a digest for providers that send none), and never a
//! secret.

use crate::both_backends;
use crate::support::{
    spawn_app, Backend, ACME_TOKEN, DEFAULT_TOKEN, GITHUB_SECRET, SLACK_SECRET, STRIPE_OLD_SECRET,
    STRIPE_SECRET, SVIX_SECRET,
};

both_backends!(
    each_tenant_sees_its_sources_and_where_their_ids_come_from,
    the_console_lists_the_tenants_sources
);

async fn each_tenant_sees_its_sources_and_where_their_ids_come_from(backend: Backend) {
    let app = spawn_app(backend).await;
    let acme = app.admin_json(ACME_TOKEN, "/sources").await;
    let names: Vec<&str> = acme["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["stripe"], "{acme}");
    let stripe = &acme["data"][0];
    assert_eq!(stripe["definition"], "stripe");
    assert_eq!(stripe["event_id"], serde_json::json!(["json:/id"]));
    assert_eq!(stripe["event_type"], serde_json::json!(["json:/type"]));
    assert_eq!(stripe["algorithms"], serde_json::json!(["hmac-sha256"]));
    assert_eq!(
        stripe["signature_from"],
        serde_json::json!(["header:stripe-signature"])
    );
    assert_eq!(stripe["timestamp_tolerance_seconds"], 300);
    assert_eq!(stripe["secrets"], 2);
    assert_eq!(
        stripe["destinations"],
        serde_json::json!(["billing", "audit"])
    );

    let default = app.admin_json(DEFAULT_TOKEN, "/sources").await;
    let by_name = |n: &str| {
        default["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == n)
            .unwrap_or_else(|| panic!("no {n} in {default}"))
            .clone()
    };
    let svix = by_name("svix");
    // The alias is kept as configured; the definition is the canonical one, with its
    // public-key version.
    assert_eq!(svix["provider"], "svix");
    assert_eq!(svix["definition"], "standard-webhooks");
    assert_eq!(
        svix["event_id"],
        serde_json::json!(["header:webhook-id", "header:svix-id"])
    );
    assert_eq!(
        svix["algorithms"],
        serde_json::json!(["hmac-sha256", "ed25519"])
    );
    let slack = by_name("slack");
    assert_eq!(
        slack["handshakes"],
        serde_json::json!(["POST json:/type=url_verification"])
    );
    assert!(by_name("github")["handshakes"]
        .as_array()
        .unwrap()
        .is_empty());

    let text = format!("{acme}{default}");
    for secret in [
        STRIPE_SECRET,
        STRIPE_OLD_SECRET,
        GITHUB_SECRET,
        SLACK_SECRET,
        SVIX_SECRET,
    ] {
        assert!(!text.contains(secret), "a secret is in the sources view");
    }
    let anonymous = app
        .admin(reqwest::Method::GET, "", "/sources", None, None)
        .await;
    assert_eq!(anonymous.status(), 401);
}

async fn the_console_lists_the_tenants_sources(backend: Backend) {
    let app = spawn_app(backend).await;
    let page = |cookie: String| {
        let url = app.url("/console/sources");
        async move {
            let r = crate::support::console::no_redirects()
                .get(url)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (status, html) = page(crate::support::console::login(&app, DEFAULT_TOKEN).await).await;
    assert_eq!(status, 200);
    for shown in [
        "/webhooks/svix",
        "header:webhook-id, header:svix-id",
        "hmac-sha256, ed25519",
        "POST json:/type=url_verification",
    ] {
        assert!(
            html.contains(shown),
            "{shown} missing from the sources page"
        );
    }
    // Another tenant's source is not listed, and no secret ever is.
    assert!(!html.contains("/webhooks/stripe"));
    for secret in [GITHUB_SECRET, SLACK_SECRET, SVIX_SECRET] {
        assert!(!html.contains(secret));
    }
    let (status, html) = page(crate::support::console::login(&app, ACME_TOKEN).await).await;
    assert_eq!(status, 200);
    assert!(html.contains("/webhooks/stripe") && !html.contains("/webhooks/svix"));
    // Without a session: sent to the login page.
    let (status, _) = page(String::new()).await;
    assert_eq!(status, 303);
}
