//! The ingest endpoint's answers, and what each one leaves in the store.

use crate::both_backends;
use crate::support::signing::{self, github_headers, slack_headers, stripe_headers, svix_headers};
use crate::support::{
    error_code, spawn_app, Backend, TestApp, GITHUB_SECRET, MAX_BODY, SLACK_SECRET,
    STRIPE_OLD_SECRET, STRIPE_SECRET, SVIX_SECRET,
};
use hookgate::domain::EventId;

both_backends!(
    new_event_is_stored_exactly_and_queued_per_destination,
    repeated_event_is_a_duplicate_with_the_same_id,
    an_old_secret_still_verifies_during_rotation,
    bad_signatures_get_401_and_store_nothing,
    unknown_source_gets_404,
    bodies_over_the_limit_get_413_with_or_without_content_length,
    unreadable_requests_get_400,
    non_utf8_body_is_stored_byte_exact,
    slack_url_verification_is_answered_and_not_stored,
    standard_webhooks_with_svix_headers_is_accepted,
    health_and_readiness_answer_200,
);

fn stripe_body(id: &str) -> String {
    format!(r#"{{"id":"{id}","object":"event","type":"invoice.paid","data":{{"amount":42}}}}"#)
}

async fn accepted_id(response: reqwest::Response) -> EventId {
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("idempotent-replayed").is_none());
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["duplicate"], false, "{body}");
    EventId::parse(body["id"].as_str().unwrap()).unwrap()
}

async fn assert_nothing_stored(app: &TestApp) {
    assert_eq!(app.store.count_events().await.unwrap(), 0);
}

async fn new_event_is_stored_exactly_and_queued_per_destination(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = stripe_body("evt_store_1");
    let id = accepted_id(app.post_stripe(&body).await).await;

    let event = app
        .store
        .get_event(id)
        .await
        .unwrap()
        .expect("event stored");
    assert_eq!(event.body, body.as_bytes());
    assert_eq!(event.source, "stripe");
    assert_eq!(event.tenant, "acme");
    assert_eq!(event.provider_event_id, "evt_store_1");
    assert_eq!(event.event_type.as_deref(), Some("invoice.paid"));
    assert_eq!(event.content_type.as_deref(), Some("application/json"));
    assert_eq!(event.verified_scheme, "stripe");
    assert_eq!(event.verified_secret_index, 0);
    assert!(
        event
            .headers
            .iter()
            .any(|(n, v)| n == "stripe-signature" && v.contains("v1=")),
        "signature header kept for re-verification: {:?}",
        event.headers
    );

    let jobs = app.store.jobs_for_event(id).await.unwrap();
    let mut destinations: Vec<_> = jobs.iter().map(|j| j.destination.as_str()).collect();
    destinations.sort();
    assert_eq!(destinations, ["audit", "billing"]);
    assert!(jobs
        .iter()
        .all(|j| j.status == hookgate::queue::JobStatus::Pending && j.attempts == 0));
}

async fn repeated_event_is_a_duplicate_with_the_same_id(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = stripe_body("evt_dup_1");
    let first = accepted_id(app.post_stripe(&body).await).await;

    // A provider retry is signed again, with a later timestamp: same event id, same answer.
    let retry = app.post_stripe(&body).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let json: serde_json::Value = retry.json().await.unwrap();
    assert_eq!(json["duplicate"], true);
    assert_eq!(json["id"], first.to_string());

    assert_eq!(app.store.count_events().await.unwrap(), 1);
    assert_eq!(app.store.jobs_for_event(first).await.unwrap().len(), 2);
}

async fn an_old_secret_still_verifies_during_rotation(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = stripe_body("evt_rotated");
    let headers = stripe_headers(STRIPE_OLD_SECRET, signing::now(), body.as_bytes());
    let id = accepted_id(app.post_webhook("stripe", &headers, body).await).await;
    let event = app.store.get_event(id).await.unwrap().unwrap();
    assert_eq!(event.verified_secret_index, 1);
}

async fn bad_signatures_get_401_and_store_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = stripe_body("evt_bad");
    let now = signing::now();

    let wrong_secret = stripe_headers("whsec_not_ours", now, body.as_bytes());
    let r = app
        .post_webhook("stripe", &wrong_secret, body.clone())
        .await;
    assert_eq!(error_code(r).await, (401, "invalid_signature".into()));

    let signed = stripe_headers(STRIPE_SECRET, now, body.as_bytes());
    let tampered = body.replace("42", "43");
    let r = app.post_webhook("stripe", &signed, tampered).await;
    assert_eq!(error_code(r).await, (401, "invalid_signature".into()));

    let r = app.post_webhook("stripe", &[], body.clone()).await;
    assert_eq!(error_code(r).await, (401, "missing_signature".into()));

    let stale = stripe_headers(STRIPE_SECRET, now - 3600, body.as_bytes());
    let r = app.post_webhook("stripe", &stale, body.clone()).await;
    assert_eq!(
        error_code(r).await,
        (401, "timestamp_out_of_tolerance".into())
    );

    let future = stripe_headers(STRIPE_SECRET, now + 3600, body.as_bytes());
    let r = app.post_webhook("stripe", &future, body.clone()).await;
    assert_eq!(
        error_code(r).await,
        (401, "timestamp_out_of_tolerance".into())
    );

    assert_nothing_stored(&app).await;
}

async fn unknown_source_gets_404(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = stripe_body("evt_404");
    let headers = stripe_headers(STRIPE_SECRET, signing::now(), body.as_bytes());
    let r = app.post_webhook("stripe-typo", &headers, body).await;
    assert_eq!(error_code(r).await, (404, "unknown_source".into()));
    assert_nothing_stored(&app).await;
}

async fn bodies_over_the_limit_get_413_with_or_without_content_length(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = stripe_body(&format!("evt_big_{}", "x".repeat(MAX_BODY)));
    assert!(body.len() > MAX_BODY);
    let headers = stripe_headers(STRIPE_SECRET, signing::now(), body.as_bytes());

    let r = app.post_webhook("stripe", &headers, body.clone()).await;
    assert_eq!(error_code(r).await, (413, "payload_too_large".into()));

    // A streamed body has no Content-Length (chunked): the limit must still hold.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = body
        .as_bytes()
        .chunks(1000)
        .map(|c| Ok(c.to_vec()))
        .collect();
    let stream = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let r = app.post_webhook("stripe", &headers, stream).await;
    assert_eq!(error_code(r).await, (413, "payload_too_large".into()));

    // Exactly at the limit is fine.
    let frame = r#"{"id":"evt_edge","pad":""}"#;
    let edge = frame.replace(
        r#""pad":"""#,
        &format!(r#""pad":"{}""#, "y".repeat(MAX_BODY - frame.len())),
    );
    assert_eq!(edge.len(), MAX_BODY);
    accepted_id(app.post_stripe(&edge).await).await;
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

async fn unreadable_requests_get_400(backend: Backend) {
    let app = spawn_app(backend).await;
    let r = app.post_stripe(r#"{"object":"event","type":"x"}"#).await;
    assert_eq!(error_code(r).await, (400, "missing_event_id".into()));

    let r = app.post_stripe(r#"{"id": "evt_1", "#).await;
    assert_eq!(error_code(r).await, (400, "malformed_body".into()));

    // GitHub's id is a header: without it there is nothing to dedupe on.
    let body = b"{}".to_vec();
    let mut headers = github_headers(GITHUB_SECRET, "unused", &body);
    headers.retain(|(n, _)| n != "X-GitHub-Delivery");
    let r = app.post_webhook("github", &headers, body).await;
    assert_eq!(error_code(r).await, (400, "missing_event_id".into()));

    assert_nothing_stored(&app).await;
}

async fn non_utf8_body_is_stored_byte_exact(backend: Backend) {
    let app = spawn_app(backend).await;
    let body: Vec<u8> = (0u8..=255)
        .rev()
        .chain([0, 0, 0xff, b'\r', b'\n'])
        .collect();
    assert!(std::str::from_utf8(&body).is_err());
    let headers = github_headers(GITHUB_SECRET, "72d3162e-cc78-11e3-81ab-4c9367dc0958", &body);
    let id = accepted_id(app.post_webhook("github", &headers, body.clone()).await).await;

    let event = app.store.get_event(id).await.unwrap().unwrap();
    assert_eq!(event.body, body);
    assert_eq!(
        event.provider_event_id,
        "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    );
    assert_eq!(event.event_type.as_deref(), Some("push"));
    assert_eq!(app.store.jobs_for_event(id).await.unwrap().len(), 1);
}

async fn slack_url_verification_is_answered_and_not_stored(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = r#"{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let headers = slack_headers(SLACK_SECRET, signing::now(), body.as_bytes());
    let r = app.post_webhook("slack", &headers, body).await;
    assert_eq!(r.status(), 200);
    let json: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        json["challenge"],
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );
    assert_nothing_stored(&app).await;

    // A forged handshake is still refused.
    let forged = slack_headers("not-the-secret", signing::now(), body.as_bytes());
    let r = app.post_webhook("slack", &forged, body).await;
    assert_eq!(error_code(r).await, (401, "invalid_signature".into()));

    let event = r#"{"type":"event_callback","event_id":"Ev123","event":{"type":"app_mention"}}"#;
    let headers = slack_headers(SLACK_SECRET, signing::now(), event.as_bytes());
    let id = accepted_id(app.post_webhook("slack", &headers, event).await).await;
    let stored = app.store.get_event(id).await.unwrap().unwrap();
    assert_eq!(stored.provider_event_id, "Ev123");
    assert_eq!(stored.event_type.as_deref(), Some("app_mention"));
}

async fn standard_webhooks_with_svix_headers_is_accepted(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = r#"{"type":"user.created","data":{}}"#;
    let headers = svix_headers(
        SVIX_SECRET,
        "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
        signing::now(),
        body.as_bytes(),
    );
    let id = accepted_id(app.post_webhook("svix", &headers, body).await).await;
    let stored = app.store.get_event(id).await.unwrap().unwrap();
    assert_eq!(stored.provider_event_id, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W");
    assert_eq!(stored.event_type.as_deref(), Some("user.created"));
    assert_eq!(stored.verified_scheme, "standard-webhooks");
}

async fn health_and_readiness_answer_200(backend: Backend) {
    let app = spawn_app(backend).await;
    for path in ["/healthz", "/readyz"] {
        let r = app.client.get(app.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
}
