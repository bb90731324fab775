//! The quarantine: requests to a known source that failed verification are kept (bounded),
//! listed, re-verified with the source's current secrets against the time they arrived, and
//! discarded.

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use crate::both_backends;
use crate::support::raw::RawConn;
use crate::support::signing::{github_headers, now, stripe_headers};
use crate::support::sink::Sink;
use crate::support::{
    spawn_app_with, spawn_app_with_sink, Backend, TestApp, ACME_TOKEN, DEFAULT_TOKEN,
    GITHUB_SECRET, STRIPE_SECRET,
};
use hookgate::store::NewQuarantined;

both_backends!(
    rejected_requests_are_kept_with_their_reason_and_unknown_sources_are_not,
    a_rotated_secret_loses_nothing_once_the_quarantine_is_verified_again,
    the_timestamp_is_checked_against_the_time_the_request_arrived,
    one_verification_is_idempotent_and_a_request_that_still_fails_stays,
    the_quarantine_keeps_the_newest_within_its_bounds,
    retention_and_discard_remove_requests,
    a_verification_cut_off_after_its_ingest_ends_as_a_duplicate,
    a_failed_quarantine_write_is_counted_and_ingest_goes_on,
    a_flooded_source_keeps_its_share_and_others_keep_theirs,
);

const NEW_GITHUB_SECRET: &str = "the-secret-rotated-at-github";

/// (source, reason) of each listed request, newest first.
async fn listed(app: &TestApp, token: &str, query: &str) -> Vec<(String, String)> {
    let page: Value = app.admin_json(token, &format!("/quarantine{query}")).await;
    page["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{page}"))
        .iter()
        .map(|q| {
            (
                q["source"].as_str().unwrap().to_owned(),
                q["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn pair(source: &str, reason: &str) -> (String, String) {
    (source.into(), reason.into())
}

fn github_body(n: usize) -> String {
    format!(r#"{{"action":"opened","number":{n}}}"#)
}

async fn post_github(app: &TestApp, secret: &str, n: usize) -> reqwest::Response {
    let body = github_body(n);
    let mut headers = github_headers(secret, &format!("delivery-{n}"), body.as_bytes());
    headers.push(("x-github-event".into(), "pull_request".into()));
    app.post_webhook("github", &headers, body).await
}

async fn rejected_requests_are_kept_with_their_reason_and_unknown_sources_are_not(
    backend: Backend,
) {
    let app = spawn_app_with(backend, |_, url| url.to_owned()).await;
    let body = r#"{"id":"evt_q1","type":"invoice.paid"}"#;
    let mut headers = stripe_headers("whsec_not_the_secret", now(), body.as_bytes());
    headers.push(("authorization".into(), "Bearer a-credential".into()));
    assert_eq!(
        app.post_webhook("stripe", &headers, body).await.status(),
        401
    );
    let stale = stripe_headers(STRIPE_SECRET, now() - 3_600, body.as_bytes());
    assert_eq!(app.post_webhook("stripe", &stale, body).await.status(), 401);
    let r = app.post_webhook("github", &[], "{}").await;
    assert_eq!(r.status(), 401);
    assert_eq!(
        app.post_webhook("nowhere", &headers, body).await.status(),
        404
    );
    app.quarantine.flush().await;

    assert_eq!(
        listed(&app, ACME_TOKEN, "").await,
        [
            pair("stripe", "timestamp_out_of_tolerance"),
            pair("stripe", "invalid_signature"),
        ],
        "newest first, only this tenant's sources"
    );
    assert_eq!(
        listed(&app, DEFAULT_TOKEN, "").await,
        [pair("github", "missing_signature")]
    );
    assert_eq!(
        listed(&app, ACME_TOKEN, "?reason=invalid_signature").await,
        [pair("stripe", "invalid_signature")]
    );
    assert_eq!(listed(&app, ACME_TOKEN, "?source=github").await, []);

    let page: Value = app
        .admin_json(ACME_TOKEN, "/quarantine?reason=invalid_signature")
        .await;
    let id = page["data"][0]["id"].as_str().unwrap();
    let detail: Value = app
        .admin_json(ACME_TOKEN, &format!("/quarantine/{id}"))
        .await;
    assert_eq!(detail["body"], body, "the exact body");
    assert_eq!(detail["method"], "POST");
    let headers = detail["headers"].as_array().unwrap();
    let value = |name: &str| {
        headers
            .iter()
            .find(|h| h["name"] == name)
            .map(|h| h["value"].as_str().unwrap().to_owned())
    };
    assert_eq!(value("authorization").as_deref(), Some("[redacted]"));
    assert!(value("stripe-signature").is_some());
    let other = app
        .admin(
            Method::GET,
            DEFAULT_TOKEN,
            &format!("/quarantine/{id}"),
            None,
            None,
        )
        .await;
    assert_eq!(other.status(), 404, "another tenant's request is not found");
}

async fn a_rotated_secret_loses_nothing_once_the_quarantine_is_verified_again(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    // GitHub signs with the new secret before hookgate knows it: every delivery is refused.
    for n in 0..12 {
        assert_eq!(post_github(&app, NEW_GITHUB_SECRET, n).await.status(), 401);
    }
    app.quarantine.flush().await;
    assert_eq!(listed(&app, DEFAULT_TOKEN, "?limit=500").await.len(), 12);

    // The operator adds the new secret; GitHub, which never retries, sends one more, and
    // one of the refused ones again by hand (a redelivery): that one is then a duplicate.
    let app = app
        .restart_with(|s| {
            let github = s.sources.iter_mut().find(|s| s.name == "github").unwrap();
            github.secrets = vec![
                NEW_GITHUB_SECRET.to_owned().into(),
                GITHUB_SECRET.to_owned().into(),
            ];
        })
        .await;
    assert_eq!(post_github(&app, NEW_GITHUB_SECRET, 12).await.status(), 200);
    assert_eq!(post_github(&app, NEW_GITHUB_SECRET, 3).await.status(), 200);

    let r = app
        .admin(
            Method::POST,
            DEFAULT_TOKEN,
            "/quarantine/verify",
            Some(r#"{"source":"github"}"#),
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    let reply: Value = r.json().await.unwrap();
    assert_eq!(
        reply,
        serde_json::json!({"ingested": 11, "duplicate": 1, "handshake": 0, "rejected": 0, "skipped": 0})
    );
    assert_eq!(
        listed(&app, DEFAULT_TOKEN, "").await,
        [],
        "the quarantine is empty"
    );

    // Every delivery is stored once, with the time it first arrived, and delivered once.
    let mut worker = app.start_worker();
    let received = sink.wait_for("/audit", 13, Duration::from_secs(20)).await;
    let mut bodies: Vec<String> = received
        .iter()
        .map(|r| String::from_utf8(r.body.clone()).unwrap())
        .collect();
    bodies.sort();
    let mut expected: Vec<String> = (0..13).map(github_body).collect();
    expected.sort();
    assert_eq!(bodies, expected, "each delivery exactly once");
    let again = app
        .admin(
            Method::POST,
            DEFAULT_TOKEN,
            "/quarantine/verify",
            None,
            None,
        )
        .await;
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["ingested"], 0);
    // The worker has claimed everything due and waits: nothing is left to deliver.
    worker.waiting().await;
    worker.stop().await;
    assert_eq!(sink.received("/audit").len(), 13, "nothing delivered twice");
}

/// A request kept an hour ago, signed then: stale now, fresh when it arrived.
fn stripe_request_of_an_hour_ago(event: &str) -> NewQuarantined {
    let at = chrono::Utc::now() - chrono::Duration::hours(1);
    let body = format!(r#"{{"id":"{event}","type":"invoice.paid"}}"#);
    let headers = stripe_headers(STRIPE_SECRET, at.timestamp(), body.as_bytes());
    NewQuarantined {
        id: uuid::Uuid::now_v7(),
        tenant: "acme".into(),
        source: "stripe".into(),
        received_at: at,
        reason: "invalid_signature".into(),
        message: "the signature does not match any configured secret".into(),
        method: "POST".into(),
        query: String::new(),
        headers_json: serde_json::to_string(&headers).unwrap(),
        body: body.into_bytes().into(),
    }
}

async fn the_timestamp_is_checked_against_the_time_the_request_arrived(backend: Backend) {
    let app = spawn_app_with(backend, |_, url| url.to_owned()).await;
    let kept = stripe_request_of_an_hour_ago("evt_old");
    app.store
        .quarantine_requests(std::slice::from_ref(&kept), 10, 1 << 20)
        .await
        .unwrap();
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/quarantine/{}/verify", kept.id),
            None,
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    let reply: Value = r.json().await.unwrap();
    assert_eq!(reply["outcome"], "ingested", "{reply}");
    let event_id = uuid::Uuid::parse_str(reply["event_id"].as_str().unwrap()).unwrap();
    let stored = app
        .store
        .get_event(hookgate::domain::EventId::from_uuid(event_id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.provider_event_id, "evt_old");
    assert_eq!(
        stored.received_at.timestamp_millis(),
        kept.received_at.timestamp_millis(),
        "stored as if it had arrived then"
    );
}

async fn one_verification_is_idempotent_and_a_request_that_still_fails_stays(backend: Backend) {
    let app = spawn_app_with(backend, |_, url| url.to_owned()).await;
    assert_eq!(post_github(&app, NEW_GITHUB_SECRET, 1).await.status(), 401);
    app.quarantine.flush().await;
    let page: Value = app.admin_json(DEFAULT_TOKEN, "/quarantine").await;
    let id = page["data"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(page["data"][0]["checks"], 1);
    let path = format!("/quarantine/{id}/verify");

    let first = app
        .admin(Method::POST, DEFAULT_TOKEN, &path, None, Some("k-1"))
        .await;
    assert_eq!(first.status(), 200);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["outcome"], "rejected");
    assert_eq!(first["reason"], "invalid_signature");
    let replayed = app
        .admin(Method::POST, DEFAULT_TOKEN, &path, None, Some("k-1"))
        .await;
    assert_eq!(replayed.headers()["idempotent-replayed"], "true");
    assert_eq!(replayed.json::<Value>().await.unwrap(), first);
    let page: Value = app.admin_json(DEFAULT_TOKEN, "/quarantine").await;
    assert_eq!(page["data"][0]["checks"], 2, "checked once more, not twice");

    let app = app
        .restart_with(|s| {
            let github = s.sources.iter_mut().find(|s| s.name == "github").unwrap();
            github.secrets.push(NEW_GITHUB_SECRET.to_owned().into());
        })
        .await;
    let ok = app
        .admin(Method::POST, DEFAULT_TOKEN, &path, None, Some("k-2"))
        .await;
    let ok: Value = ok.json().await.unwrap();
    assert_eq!(ok["outcome"], "ingested");
    let replayed = app
        .admin(Method::POST, DEFAULT_TOKEN, &path, None, Some("k-2"))
        .await;
    assert_eq!(
        replayed.json::<Value>().await.unwrap(),
        ok,
        "the saved answer"
    );
    let gone = app
        .admin(Method::POST, DEFAULT_TOKEN, &path, None, None)
        .await;
    assert_eq!(gone.status(), 404, "it left the quarantine");
}

async fn the_quarantine_keeps_the_newest_within_its_bounds(backend: Backend) {
    let app = spawn_app_with(backend, |s, url| {
        s.quarantine.max_per_source = 5;
        s.quarantine.max_bytes_per_source = 600;
        url.to_owned()
    })
    .await;
    for n in 0..20 {
        assert_eq!(post_github(&app, NEW_GITHUB_SECRET, n).await.status(), 401);
        // Flushed one by one, so that each is its own write and eviction.
        app.quarantine.flush().await;
    }
    let (count, bytes) = app.store.quarantine_usage("github").await.unwrap();
    assert_eq!(count, 5);
    assert!(bytes <= 600, "{bytes}");
    let page: Value = app.admin_json(DEFAULT_TOKEN, "/quarantine").await;
    let numbers: Vec<String> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            let id = q["id"].as_str().unwrap();
            id.to_owned()
        })
        .collect();
    let mut kept = Vec::new();
    for id in &numbers {
        let d: Value = app
            .admin_json(DEFAULT_TOKEN, &format!("/quarantine/{id}"))
            .await;
        kept.push(d["body"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        kept,
        (15..20).rev().map(github_body).collect::<Vec<_>>(),
        "the newest five"
    );

    // Bytes bound: 600 bytes hold fewer bodies of 200 bytes than the count allows.
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(190));
    for _ in 0..6 {
        let r = app.post_webhook("slack", &[], big.clone()).await;
        assert_eq!(r.status(), 401);
    }
    app.quarantine.flush().await;
    let (count, bytes) = app.store.quarantine_usage("slack").await.unwrap();
    assert_eq!((count, bytes), (3, 3 * big.len() as i64));
    // A body larger than the whole allowance is not kept at all.
    let huge = "y".repeat(700);
    app.post_webhook("svix", &[], huge).await;
    app.quarantine.flush().await;
    assert_eq!(app.store.quarantine_usage("svix").await.unwrap(), (0, 0));
}

async fn retention_and_discard_remove_requests(backend: Backend) {
    let app = spawn_app_with(backend, |_, url| url.to_owned()).await;
    for n in 0..2 {
        post_github(&app, NEW_GITHUB_SECRET, n).await;
    }
    app.quarantine.flush().await;
    let page: Value = app.admin_json(DEFAULT_TOKEN, "/quarantine").await;
    let id = page["data"][0]["id"].as_str().unwrap();
    let r = app
        .admin(
            Method::DELETE,
            DEFAULT_TOKEN,
            &format!("/quarantine/{id}"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(listed(&app, DEFAULT_TOKEN, "").await.len(), 1);
    let r = app
        .admin(
            Method::DELETE,
            DEFAULT_TOKEN,
            &format!("/quarantine/{id}"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status(), 404);

    let reconciler = app.reconciler();
    let report = reconciler
        .sweep_at(chrono::Utc::now() + chrono::Duration::days(6))
        .await
        .unwrap();
    assert_eq!(report.expired_quarantine, 0, "kept for 7 days");
    let report = reconciler
        .sweep_at(chrono::Utc::now() + chrono::Duration::days(8))
        .await
        .unwrap();
    assert_eq!(report.expired_quarantine, 1);
    assert_eq!(listed(&app, DEFAULT_TOKEN, "").await, []);
}

/// The crash window between a re-verification's ingest and the removal of its request: the
/// event is committed and the request is still quarantined (as after a crash). Verifying it
/// again finds the event stored, answers `duplicate`, and takes it out: one event.
async fn a_verification_cut_off_after_its_ingest_ends_as_a_duplicate(backend: Backend) {
    let app = spawn_app_with(backend, |_, url| url.to_owned()).await;
    let kept = stripe_request_of_an_hour_ago("evt_cut_off");
    app.store
        .quarantine_requests(std::slice::from_ref(&kept), 10, 1 << 20)
        .await
        .unwrap();
    let whole = app
        .store
        .find_quarantined(kept.id, "acme")
        .await
        .unwrap()
        .unwrap();
    let source = app.config.sources["stripe"].clone();
    let first = hookgate::quarantine::reverify(&app.batcher, &source, &whole)
        .await
        .unwrap();
    let hookgate::quarantine::Reverified::Ingested {
        event_id,
        duplicate: false,
    } = first
    else {
        panic!("{first:?}");
    };
    let path = format!("/quarantine/{}/verify", kept.id);
    let r = app.admin(Method::POST, ACME_TOKEN, &path, None, None).await;
    let reply: Value = r.json().await.unwrap();
    assert_eq!(reply["outcome"], "duplicate", "{reply}");
    assert_eq!(reply["event_id"], event_id.to_string());
    assert_eq!(app.store.count_events().await.unwrap(), 1);
    assert_eq!(listed(&app, ACME_TOKEN, "").await, []);
}

/// The store refuses the quarantine's write: the requests are counted as lost to the
/// quarantine, and valid ingest is not touched.
async fn a_failed_quarantine_write_is_counted_and_ingest_goes_on(backend: Backend) {
    let app = spawn_app_with(backend, |_, url| url.to_owned()).await;
    let mut conn = RawConn::open(&app).await;
    match backend {
        Backend::Sqlite => {
            conn.exec(
                "CREATE TRIGGER refuse BEFORE INSERT ON quarantine \
                 BEGIN SELECT RAISE(ABORT, 'refused'); END",
            )
            .await
        }
        Backend::Postgres => {
            conn.exec(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION 'refused'; END $$; \
                 CREATE TRIGGER refuse BEFORE INSERT ON quarantine \
                 FOR EACH ROW EXECUTE FUNCTION refuse()",
            )
            .await
        }
    }
    assert_eq!(post_github(&app, NEW_GITHUB_SECRET, 1).await.status(), 401);
    app.quarantine.flush().await;
    let failed = app
        .metrics
        .quarantine
        .with_label_values(&["github", "write_failed"])
        .get();
    assert_eq!(failed, 1);
    assert_eq!(post_github(&app, GITHUB_SECRET, 2).await.status(), 200);
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

/// 1,500 refused requests to one source as fast as they come: the source keeps at most its
/// burst and rate (the rest dropped and counted), and another source's request is kept.
async fn a_flooded_source_keeps_its_share_and_others_keep_theirs(backend: Backend) {
    use futures_util::StreamExt as _;
    let app = spawn_app_with(backend, |s, url| {
        s.quarantine.max_per_source = 20;
        url.to_owned()
    })
    .await;
    let started = std::time::Instant::now();
    let statuses: Vec<u16> = futures_util::stream::iter(0..1_500)
        .map(|n| {
            let app = &app;
            async move {
                post_github(app, NEW_GITHUB_SECRET, n)
                    .await
                    .status()
                    .as_u16()
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    assert!(statuses.iter().all(|s| *s == 401));
    let body = r#"{"id":"evt_beside_the_flood","type":"invoice.paid"}"#;
    let headers = stripe_headers("whsec_rotated_at_stripe", now(), body.as_bytes());
    assert_eq!(
        app.post_webhook("stripe", &headers, body).await.status(),
        401
    );
    app.quarantine.flush().await;
    let count = |source: &str, outcome: &str| {
        app.metrics
            .quarantine
            .with_label_values(&[source, outcome])
            .get()
    };
    let (kept, rate, full) = (
        count("github", "kept"),
        count("github", "dropped_rate"),
        count("github", "dropped_full"),
    );
    assert_eq!(kept + rate + full, 1_500);
    let allowance = 512.0 + 64.0 * elapsed;
    assert!(
        (kept as f64) <= allowance + 1.0,
        "kept {kept} of 1,500 in {elapsed:.1} s: over the admission's {allowance:.0}"
    );
    assert_eq!(
        count("stripe", "kept"),
        1,
        "the other source is not crowded out"
    );
    assert_eq!(app.store.quarantine_usage("github").await.unwrap().0, 20);
}
