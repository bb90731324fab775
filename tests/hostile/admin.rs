//! Admin tokens: missing, another tenant's, one byte off.

use crate::common::*;

both_backends!(admin_tokens_missing_foreign_or_one_byte_off,);

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
