//! Idempotency-Key on admin POSTs: each rule of README "Idempotency-Key", on both stores.

use std::sync::Arc;

use chrono::Utc;
use reqwest::Method;
use sha2::Digest as _;

use crate::both_backends;
use crate::support::sink::Sink;
use crate::support::{error_code, spawn_app_with_sink, Backend, TestApp, ACME_TOKEN};
use hookgate::store::IdempotencyBegin;

both_backends!(
    the_same_key_and_request_replays_the_saved_response_and_acts_once,
    the_same_key_with_another_request_is_refused,
    keys_are_bound_to_the_tenant,
    the_same_key_while_the_first_runs_gets_409,
    an_abandoned_started_key_is_reclaimed,
    server_errors_are_not_saved_and_client_errors_are,
    keys_expire_after_the_window,
    without_a_key_every_request_runs,
    a_retried_bulk_replay_is_not_repeated,
    an_interrupted_bulk_replay_resumes_after_its_last_batch,
    an_interrupted_undelivered_retry_resumes_and_retries_each_job_once,
);

async fn jobs_of(app: &TestApp, event: hookgate::domain::EventId) -> usize {
    app.store.jobs_for_event(event).await.unwrap().len()
}

fn replay_path(event: hookgate::domain::EventId) -> String {
    format!("/events/{event}/replay")
}

async fn the_same_key_and_request_replays_the_saved_response_and_acts_once(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let event = app.ingest_stripe("evt_idem").await;
    let path = replay_path(event);
    let first = app
        .admin(Method::POST, ACME_TOKEN, &path, None, Some("key-1"))
        .await;
    assert_eq!(first.status(), 202);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first_body = first.bytes().await.unwrap();
    assert_eq!(jobs_of(&app, event).await, 4);

    let again = app
        .admin(Method::POST, ACME_TOKEN, &path, None, Some("key-1"))
        .await;
    assert_eq!(again.status(), 202);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.bytes().await.unwrap(), first_body, "byte for byte");
    assert_eq!(jobs_of(&app, event).await, 4, "nothing changed");
}

async fn the_same_key_with_another_request_is_refused(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let event = app.ingest_stripe("evt_idem_mismatch").await;
    let path = replay_path(event);
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &path,
            Some(r#"{"destinations":["billing"]}"#),
            Some("k"),
        )
        .await;
    assert_eq!(r.status(), 202);
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &path,
            Some(r#"{"destinations":["audit"]}"#),
            Some("k"),
        )
        .await;
    assert_eq!(error_code(r).await, (422, "idempotency_key_reused".into()));
    let other = app.ingest_stripe("evt_idem_other").await;
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &replay_path(other),
            Some(r#"{"destinations":["billing"]}"#),
            Some("k"),
        )
        .await;
    assert_eq!(
        error_code(r).await,
        (422, "idempotency_key_reused".into()),
        "another path"
    );
    assert_eq!(jobs_of(&app, event).await, 3);
    assert_eq!(jobs_of(&app, other).await, 2);
}

async fn keys_are_bound_to_the_tenant(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let acme = app.ingest_stripe("evt_tenant_key").await;
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &replay_path(acme),
            None,
            Some("shared"),
        )
        .await;
    assert_eq!(r.status(), 202);
    // The same key from the other tenant is its own record: its request runs.
    let r = app
        .admin(
            Method::POST,
            crate::support::DEFAULT_TOKEN,
            "/replay",
            Some(r#"{"source":"github"}"#),
            Some("shared"),
        )
        .await;
    assert_eq!(r.status(), 202);
    assert!(r.headers().get("idempotent-replayed").is_none());
}

async fn the_same_key_while_the_first_runs_gets_409(backend: Backend) {
    let sink = Sink::start().await;
    let app = Arc::new(spawn_app_with_sink(backend, &sink, |_| {}).await);
    let event = app.ingest_stripe("evt_idem_busy").await;
    let path = replay_path(event);
    app.admin_pause.arm();
    let first = {
        let (app, path) = (app.clone(), path.clone());
        tokio::spawn(async move {
            app.admin(Method::POST, ACME_TOKEN, &path, None, Some("busy"))
                .await
        })
    };
    // Held mid-action, after its key was recorded and before its jobs commit.
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        app.admin_pause.reached.notified(),
    )
    .await
    .expect("the first request reached the pause point");
    let second = app
        .admin(Method::POST, ACME_TOKEN, &path, None, Some("busy"))
        .await;
    assert_eq!(
        error_code(second).await,
        (409, "idempotency_in_progress".into())
    );
    assert_eq!(jobs_of(&app, event).await, 2, "nothing replayed yet");

    app.admin_pause.release.notify_one();
    let first = first.await.unwrap();
    assert_eq!(first.status(), 202);
    let first_body = first.bytes().await.unwrap();
    let third = app
        .admin(Method::POST, ACME_TOKEN, &path, None, Some("busy"))
        .await;
    assert_eq!(third.headers()["idempotent-replayed"], "true");
    assert_eq!(third.bytes().await.unwrap(), first_body);
    assert_eq!(jobs_of(&app, event).await, 4, "replayed exactly once");
}

fn request_hash(method: &str, path: &str, body: &[u8]) -> String {
    let mut h = sha2::Sha256::new();
    for part in [method.as_bytes(), b"\n", path.as_bytes(), b"\n", body] {
        h.update(part);
    }
    hex::encode(h.finalize())
}

async fn an_abandoned_started_key_is_reclaimed(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let event = app.ingest_stripe("evt_idem_abandoned").await;
    let path = replay_path(event);
    let hash = request_hash("POST", &format!("/admin/v1{path}"), b"");
    let now = Utc::now();
    // A request that started an hour ago and whose process died before it finished.
    let begun = app
        .store
        .idempotency_begin(
            "acme",
            "abandoned",
            &hash,
            now - chrono::Duration::hours(1),
            now,
        )
        .await
        .unwrap();
    assert_eq!(begun, IdempotencyBegin::Proceed { progress: None });
    // And one that started just now: still running.
    app.store
        .idempotency_begin(
            "acme",
            "running",
            &hash,
            now,
            now - chrono::Duration::hours(1),
        )
        .await
        .unwrap();

    let r = app
        .admin(Method::POST, ACME_TOKEN, &path, None, Some("running"))
        .await;
    assert_eq!(error_code(r).await, (409, "idempotency_in_progress".into()));
    let r = app
        .admin(Method::POST, ACME_TOKEN, &path, None, Some("abandoned"))
        .await;
    assert_eq!(
        r.status(),
        202,
        "older than idempotency_stale_after: reclaimed"
    );
    assert!(r.headers().get("idempotent-replayed").is_none());
    assert_eq!(jobs_of(&app, event).await, 4);
}

async fn server_errors_are_not_saved_and_client_errors_are(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let event = app.ingest_stripe("evt_idem_5xx").await;
    let path = replay_path(event);

    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &path,
            Some(r#"{"destinations":["nowhere"]}"#),
            Some("4xx"),
        )
        .await;
    assert_eq!(error_code(r).await, (422, "unprocessable".into()));
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &path,
            Some(r#"{"destinations":["nowhere"]}"#),
            Some("4xx"),
        )
        .await;
    assert_eq!(r.status(), 422);
    assert_eq!(r.headers()["idempotent-replayed"], "true", "a 4xx is saved");

    // The store refuses the job inserts: a 503, not saved, so the same key can retry.
    let fail = crate::crash::RawConnHandle::open(&app).await;
    fail.install_job_insert_failure(backend).await;
    let r = app
        .admin(Method::POST, ACME_TOKEN, &path, None, Some("5xx"))
        .await;
    assert_eq!(error_code(r).await, (503, "store_unavailable".into()));
    fail.remove_job_insert_failure(backend).await;
    let r = app
        .admin(Method::POST, ACME_TOKEN, &path, None, Some("5xx"))
        .await;
    assert_eq!(r.status(), 202);
    assert!(
        r.headers().get("idempotent-replayed").is_none(),
        "it ran this time"
    );
    assert_eq!(jobs_of(&app, event).await, 4);
}

async fn keys_expire_after_the_window(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let event = app.ingest_stripe("evt_idem_expiry").await;
    let path = replay_path(event);
    let r = app
        .admin(Method::POST, ACME_TOKEN, &path, None, Some("old"))
        .await;
    assert_eq!(r.status(), 202);
    let report = app
        .reconciler()
        .sweep_at(Utc::now() + chrono::Duration::hours(25))
        .await
        .unwrap();
    assert_eq!(report.expired_idempotency_keys, 1);
    let r = app
        .admin(Method::POST, ACME_TOKEN, &path, None, Some("old"))
        .await;
    assert_eq!(r.status(), 202);
    assert!(
        r.headers().get("idempotent-replayed").is_none(),
        "expired: it runs again"
    );
    assert_eq!(jobs_of(&app, event).await, 6);
}

async fn without_a_key_every_request_runs(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let event = app.ingest_stripe("evt_idem_none").await;
    for _ in 0..2 {
        let r = app
            .admin(Method::POST, ACME_TOKEN, &replay_path(event), None, None)
            .await;
        assert_eq!(r.status(), 202);
    }
    assert_eq!(jobs_of(&app, event).await, 6);
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &replay_path(event),
            None,
            Some(""),
        )
        .await;
    assert_eq!(
        error_code(r).await,
        (400, "bad_request".into()),
        "an empty key"
    );
}

async fn a_retried_bulk_replay_is_not_repeated(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let a = app.ingest_stripe("evt_bulk_a").await;
    let b = app.ingest_stripe("evt_bulk_b").await;
    let body = r#"{"source":"stripe"}"#;
    let first = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/replay",
            Some(body),
            Some("bulk"),
        )
        .await;
    assert_eq!(first.status(), 202);
    let first_body = first.bytes().await.unwrap();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&first_body).unwrap()["replayed"],
        2
    );
    let retry = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/replay",
            Some(body),
            Some("bulk"),
        )
        .await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.bytes().await.unwrap(), first_body);
    assert_eq!(jobs_of(&app, a).await, 4);
    assert_eq!(jobs_of(&app, b).await, 4);
}

async fn an_interrupted_bulk_replay_resumes_after_its_last_batch(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let events = [
        app.ingest_stripe("evt_resume_a").await,
        app.ingest_stripe("evt_resume_b").await,
        app.ingest_stripe("evt_resume_c").await,
    ];
    let body = r#"{"source":"stripe"}"#;
    let hash = request_hash("POST", "/admin/v1/replay", body.as_bytes());
    let now = Utc::now();
    // A bulk replay that started an hour ago, committed one batch, and died.
    app.store
        .idempotency_begin(
            "acme",
            "resume",
            &hash,
            now - chrono::Duration::hours(1),
            now,
        )
        .await
        .unwrap();
    let filter = hookgate::store::EventFilter {
        tenant: "acme".into(),
        source: Some("stripe".into()),
        ..Default::default()
    };
    let routes = std::collections::BTreeMap::from([(
        "stripe".to_owned(),
        vec!["billing".to_owned(), "audit".to_owned()],
    )]);
    let key = hookgate::store::ProgressKey {
        tenant: "acme",
        key: "resume",
    };
    let done = app
        .store
        .replay_events_batch(
            &filter,
            Default::default(),
            1,
            &routes,
            now - chrono::Duration::hours(1),
            Some(key),
        )
        .await
        .unwrap();
    assert_eq!(done.done, 1);
    // Make the record look abandoned again (the batch refreshed it).
    let conn = crate::crash::RawConnHandle::open(&app).await;
    conn.age_idempotency_key("resume").await;

    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/replay",
            Some(body),
            Some("resume"),
        )
        .await;
    assert_eq!(r.status(), 202);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["replayed"], 3);
    for e in events {
        assert_eq!(
            jobs_of(&app, e).await,
            4,
            "each event replayed exactly once"
        );
    }
}

/// A retry of undelivered jobs that committed one batch and died: the same key resumes it,
/// and the run's start (kept in its progress) spares the job the first batch retried, which
/// is still undelivered (retrying) and would otherwise be retried again.
async fn an_interrupted_undelivered_retry_resumes_and_retries_each_job_once(backend: Backend) {
    let sink = Sink::start().await;
    sink.always("/billing", crate::support::sink::Answer::status(500));
    let app = spawn_app_with_sink(backend, &sink, |s| {
        s.sources[0].destinations = vec!["billing".into()];
    })
    .await;
    app.ingest_stripes("evt_undelivered_resume", 3).await;
    app.worker().run_once().await.unwrap();
    let body = "{}";
    let hash = request_hash("POST", "/admin/v1/undelivered/retry", body.as_bytes());
    let now = Utc::now();
    app.store
        .idempotency_begin(
            "acme",
            "resume-u",
            &hash,
            now - chrono::Duration::hours(1),
            now,
        )
        .await
        .unwrap();
    let filter = hookgate::store::UndeliveredFilter {
        tenant: "acme".into(),
        ..Default::default()
    };
    let started = hookgate::store::BulkProgress {
        after: Some(hookgate::store::PageCursor {
            at: now,
            id: uuid::Uuid::nil(),
        }),
        done: 0,
    };
    let key = hookgate::store::ProgressKey {
        tenant: "acme",
        key: "resume-u",
    };
    // The batch ran at the run's start: its job is changed at `now`, before the resumed
    // request, so only the kept start time spares it.
    let first = app
        .store
        .retry_undelivered_batch(&filter, now, started, 1, now, Some(key))
        .await
        .unwrap();
    assert_eq!(first.done, 1);
    // While the run is not yet stale, the same key is told how far it has got.
    let running = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/undelivered/retry",
            Some(body),
            Some("resume-u"),
        )
        .await;
    assert_eq!(running.status(), 409);
    let error: serde_json::Value = running.json().await.unwrap();
    assert_eq!(error["error"]["code"], "idempotency_in_progress");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("(1 done so far)"), "{message}");
    let conn = crate::crash::RawConnHandle::open(&app).await;
    conn.age_idempotency_key("resume-u").await;

    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/undelivered/retry",
            Some(body),
            Some("resume-u"),
        )
        .await;
    assert_eq!(r.status(), 202);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["retried"],
        3,
        "each of the three once"
    );
}
