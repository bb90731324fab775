//! Delivery: retries on schedule, dead letters, signing, and what a destination's answer does.

use std::time::Duration;

use chrono::Utc;
use reqwest::Method;

use crate::both_backends;
use crate::support::raw::RawConn;
use crate::support::sink::{Answer, Sink};
use crate::support::{spawn_app_with_sink, Backend, TestApp, ACME_TOKEN};
use hookgate::queue::JobStatus;
use hookgate::verify::{ProviderRegistry, RequestHeaders, SourceVerifier, Unverified, Verified};

both_backends!(
    a_destination_failing_twice_gets_it_on_the_third_attempt,
    an_always_failing_destination_ends_failed_with_full_history,
    gone_fails_at_once_and_redirects_are_failures,
    retry_after_is_honoured_on_429,
    forwards_are_signed_standard_webhooks_style,
    a_running_worker_wakes_for_new_jobs_without_polling,
    a_job_whose_wake_up_was_lost_is_delivered_at_the_next_poll,
    a_claim_takes_as_many_due_jobs_as_asked_oldest_first,
    a_destination_s_headers_are_sent_from_secret_references,
);

/// Far enough ahead that every scheduled retry is due.
fn later(hours: i64) -> chrono::DateTime<Utc> {
    Utc::now() + chrono::Duration::hours(hours)
}

async fn a_destination_failing_twice_gets_it_on_the_third_attempt(backend: Backend) {
    let sink = Sink::start().await;
    sink.script("/billing", &[Answer::status(500), Answer::status(500)]);
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let event = app.ingest_stripe("evt_third_time").await;
    let worker = app.worker();

    assert_eq!(worker.run_once().await.unwrap(), 2, "billing and audit");
    let job = app.job(event, "billing").await;
    assert_eq!(job.status, JobStatus::Pending);
    assert_eq!(job.attempts, 1);
    assert_eq!(job.last_error.as_deref(), Some("HTTP 500"));
    let wait = job.next_attempt_at - job.updated_at;
    assert!(
        wait >= chrono::Duration::seconds(5) && wait <= chrono::Duration::milliseconds(5600),
        "first retry after 5s plus at most 10% jitter, got {wait}"
    );
    assert_eq!(
        worker.run_once().await.unwrap(),
        0,
        "the retry is not due yet"
    );

    worker.run_once_at(later(1)).await.unwrap();
    worker.run_once_at(later(2)).await.unwrap();
    let job = app.job(event, "billing").await;
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(job.attempts, 3);
    assert_eq!(job.last_error, None);

    let history = app.store.attempts_for_job(job.id).await.unwrap();
    let summary: Vec<_> = history
        .iter()
        .map(|a| (a.attempt, a.status_code, a.outcome.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            (1, Some(500), "retry"),
            (2, Some(500), "retry"),
            (3, Some(200), "succeeded")
        ]
    );
    assert!(history.iter().all(|a| a.worker_id == worker.id()));

    let received = sink.received("/billing");
    assert_eq!(received.len(), 3);
    let ids: Vec<_> = received.iter().map(|r| r.header("webhook-id")).collect();
    assert!(ids.iter().all(|id| *id == event.to_string()), "{ids:?}");
    let attempts: Vec<_> = received
        .iter()
        .map(|r| r.header("hookgate-attempt"))
        .collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    assert_eq!(app.job(event, "audit").await.status, JobStatus::Succeeded);
}

async fn an_always_failing_destination_ends_failed_with_full_history(backend: Backend) {
    let sink = Sink::start().await;
    sink.always("/billing", Answer::status(502));
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let event = app.ingest_stripe("evt_doomed_destination").await;
    let worker = app.worker();

    // The default schedule has 7 retries: 8 attempts in all.
    for hour in 0..20 {
        worker.run_once_at(later(hour * 24)).await.unwrap();
    }
    let job = app.job(event, "billing").await;
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(job.attempts, 8);
    assert_eq!(job.last_error.as_deref(), Some("HTTP 502"));
    let history = app.store.attempts_for_job(job.id).await.unwrap();
    assert_eq!(history.len(), 8);
    assert!(history[..7].iter().all(|a| a.outcome == "retry"));
    assert_eq!(history[7].outcome, "failed");
    assert_eq!(
        history.iter().map(|a| a.attempt).collect::<Vec<_>>(),
        (1..=8).collect::<Vec<_>>()
    );
    assert_eq!(sink.received("/billing").len(), 8);
    assert_eq!(app.store.count_jobs(JobStatus::Failed).await.unwrap(), 1);
}

async fn gone_fails_at_once_and_redirects_are_failures(backend: Backend) {
    let sink = Sink::start().await;
    sink.script("/billing", &[Answer::status(410)]);
    sink.script("/audit", &[Answer::status(302)]);
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let event = app.ingest_stripe("evt_gone").await;
    app.worker().run_once().await.unwrap();

    let billing = app.job(event, "billing").await;
    assert_eq!(billing.status, JobStatus::Failed);
    assert_eq!(billing.attempts, 1);
    assert_eq!(billing.last_error.as_deref(), Some("HTTP 410"));

    let audit = app.job(event, "audit").await;
    assert_eq!(audit.status, JobStatus::Pending, "a 3xx is retried");
    assert_eq!(audit.last_error.as_deref(), Some("HTTP 302"));
    assert!(
        sink.received("/elsewhere").is_empty(),
        "redirects are not followed"
    );
}

async fn retry_after_is_honoured_on_429(backend: Backend) {
    let sink = Sink::start().await;
    sink.script(
        "/billing",
        &[Answer {
            status: 429,
            retry_after: Some(120),
            delay: None,
        }],
    );
    sink.script(
        "/audit",
        &[Answer {
            status: 503,
            retry_after: Some(1),
            delay: None,
        }],
    );
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let event = app.ingest_stripe("evt_slow_down").await;
    app.worker().run_once().await.unwrap();

    let billing = app.job(event, "billing").await;
    let wait = billing.next_attempt_at - billing.updated_at;
    assert!(
        wait >= chrono::Duration::seconds(120) && wait <= chrono::Duration::seconds(133),
        "Retry-After 120 beats the 5s schedule: {wait}"
    );
    let audit = app.job(event, "audit").await;
    let wait = audit.next_attempt_at - audit.updated_at;
    assert!(
        wait >= chrono::Duration::seconds(5),
        "never earlier than the schedule: {wait}"
    );
}

async fn forwards_are_signed_standard_webhooks_style(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let body = r#"{"id":"evt_signed","type":"invoice.paid","amount":42}"#;
    let r = app.post_stripe(body).await;
    let event: serde_json::Value = r.json().await.unwrap();
    app.worker().run_once().await.unwrap();

    let got = sink.received("/billing").pop().expect("delivered");
    assert_eq!(got.body, body.as_bytes(), "the exact stored bytes");
    assert_eq!(got.header("content-type"), "application/json");
    assert_eq!(got.header("webhook-id"), event["id"].as_str().unwrap());
    assert_eq!(got.header("hookgate-source"), "stripe");
    assert_eq!(got.header("hookgate-event-type"), "invoice.paid");
    assert_eq!(got.header("hookgate-provider-event-id"), "evt_signed");
    assert_eq!(got.header("hookgate-attempt"), "1");

    // Verify with a Standard Webhooks verifier (hookgate's own, checked against the
    // published vector) holding only the destination's secret.
    let registry = ProviderRegistry::builtin().unwrap();
    let definition = (**registry.get("standard-webhooks").unwrap()).clone();
    let verifier =
        SourceVerifier::new(definition, &["whsec_dGVzdC1iaWxsaW5nLXNpZ25pbmcta2V5"]).unwrap();
    let headers: RequestHeaders = got.headers.iter().map(|(k, v)| (k, v.clone())).collect();
    let verified = Unverified::new(headers.clone(), got.body.clone().into())
        .verify(&verifier, Utc::now().timestamp())
        .expect("the forward verifies");
    let Verified::Event(forward) = verified else {
        panic!("not an event")
    };
    assert_eq!(
        forward.provider_event_id().as_str(),
        event["id"].as_str().unwrap()
    );

    let wrong = SourceVerifier::new(
        (**registry.get("standard-webhooks").unwrap()).clone(),
        &["whsec_dGVzdC1hdWRpdC1zaWduaW5nLWtleQ=="],
    )
    .unwrap();
    assert!(Unverified::new(headers, got.body.into())
        .verify(&wrong, Utc::now().timestamp())
        .is_err());
}

async fn a_running_worker_wakes_for_new_jobs_without_polling(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| {
        // Polling alone would take an hour: only a wake-up can deliver in time.
        s.worker.poll_interval = "1h".into();
    })
    .await;
    let mut worker = app.start_worker();
    // No wait needed: the worker listens before its first claim, so an event stored before
    // it listens is claimed by that first pass, and one stored after wakes it.
    app.ingest_stripe("evt_wake").await;
    let got = sink.wait_for("/billing", 1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1, "delivered promptly after a wake-up");

    // That first event may have been found by the worker's first claim, with no wake-up at
    // all. Once the worker waits, only a wake-up can deliver: from ingest's commit, and from
    // an admin replay's.
    worker.waiting().await;
    let second = app.ingest_stripe("evt_wake_2").await;
    let got = sink.wait_for("/billing", 2, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 2, "a waiting worker was not woken by ingest");
    worker.waiting().await;
    let replay = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/events/{second}/replay"),
            None,
            None,
        )
        .await;
    assert_eq!(replay.status(), 202);
    let got = sink.wait_for("/billing", 3, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 3, "a waiting worker was not woken by a replay");
    worker.stop().await;
}

/// The wake-up follows the commit of the jobs it is for (on PostgreSQL from a task of its
/// own), so a process can die between the two (docs/FAILURE-STORY.md, W6). The jobs are
/// durable and pending, and a running worker finds them at its next poll.
async fn a_job_whose_wake_up_was_lost_is_delivered_at_the_next_poll(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| {
        s.worker.poll_interval = "200ms".into();
        s.worker.handoff = false;
    })
    .await;
    let worker = app.start_worker();
    app.ingest_stripe("evt_before").await;
    sink.wait_for("/billing", 1, Duration::from_secs(10)).await;

    // Committed by another process that died before its wake-up: no NOTIFY, no local wake.
    commit_an_event_and_its_job_without_waking(&app).await;
    let got = sink.wait_for("/billing", 2, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 2, "the job with no wake-up was not delivered");
    assert_eq!(got[1].body, b"{}".to_vec());
    worker.stop().await;
}

/// One `svix` event (destination `billing`) and its pending job, written with plain SQL.
async fn commit_an_event_and_its_job_without_waking(app: &TestApp) {
    const EVENT: &str = "00000000-0000-7000-8000-00000000e6e6";
    const JOB: &str = "00000000-0000-7000-8000-00000000e6e7";
    let (events, jobs) = match app.backend {
        Backend::Sqlite => (
            format!(
                "INSERT INTO events (id, tenant, source, provider_event_id, event_type, \
                    received_at, content_type, headers, body, verified_scheme, \
                    verified_secret_index) \
                 VALUES ('{EVENT}', 'default', 'svix', 'msg_lost_wakeup', 'test', \
                    CAST(strftime('%s', 'now') AS INTEGER) * 1000, 'application/json', '[]', \
                    x'7b7d', 'svix', 0)"
            ),
            format!(
                "INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
                    created_at, updated_at) \
                 VALUES ('{JOB}', '{EVENT}', 'billing', 'pending', 0, \
                    CAST(strftime('%s', 'now') AS INTEGER) * 1000 - 1000, 0, 0)"
            ),
        ),
        Backend::Postgres => (
            format!(
                "INSERT INTO events (id, tenant, source, provider_event_id, event_type, \
                    received_at, content_type, headers, body, verified_scheme, \
                    verified_secret_index) \
                 VALUES ('{EVENT}', 'default', 'svix', 'msg_lost_wakeup', 'test', now(), \
                    'application/json', '[]'::jsonb, '\\x7b7d'::bytea, 'svix', 0)"
            ),
            format!(
                "INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
                    created_at, updated_at) \
                 VALUES ('{JOB}', '{EVENT}', 'billing', 'pending', 0, \
                    now() - interval '1 second', now(), now())"
            ),
        ),
    };
    RawConn::open(app)
        .await
        .exec(&format!("BEGIN; {events}; {jobs}; COMMIT;"))
        .await;
}

/// A claim takes exactly as many due jobs as asked, the oldest first, none twice, and a
/// later claim takes what is left.
async fn a_claim_takes_as_many_due_jobs_as_asked_oldest_first(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let events = app.ingest_stripes("evt_claim", 7).await;
    let now = later(1);
    let lease = now + chrono::Duration::seconds(30);
    let claim = |limit| app.store.claim_jobs("billing", limit, now, lease);
    let first = claim(5).await.unwrap();
    let second = claim(5).await.unwrap();
    assert_eq!(claim(5).await.unwrap().len(), 0, "all seven taken");
    let ids = |jobs: &[hookgate::store::ClaimedJob]| {
        let mut ids: Vec<_> = jobs.iter().map(|j| j.event_id).collect();
        ids.sort();
        ids
    };
    let sorted = |events: &[hookgate::domain::EventId]| {
        let mut events = events.to_vec();
        events.sort();
        events
    };
    assert_eq!(ids(&first), sorted(&events[..5]), "the five oldest");
    assert_eq!(ids(&second), sorted(&events[5..]), "the two left");
    let audit = app.store.claim_jobs("audit", 3, now, lease).await.unwrap();
    assert_eq!(ids(&audit), sorted(&events[..3]), "the three oldest");
}

/// `headers = { Authorization = "file:..." }` on billing: the resolved value goes with every
/// delivery to billing, to no other destination, and hookgate's own headers stay its own.
async fn a_destination_s_headers_are_sent_from_secret_references(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("sink-token");
    std::fs::write(&token, "Bearer sink-secret-1\n").unwrap();
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| {
        let billing = s
            .destinations
            .iter_mut()
            .find(|d| d.name == "billing")
            .unwrap();
        billing.headers = [
            (
                "Authorization".to_owned(),
                format!("file:{}", token.display()).into(),
            ),
            ("X-Team".to_owned(), "payments".to_owned().into()),
        ]
        .into();
    })
    .await;
    app.ingest_stripe("evt_headers").await;
    app.worker().run_once().await.unwrap();
    let billed = sink.received("/billing");
    assert_eq!(billed.len(), 1);
    assert_eq!(billed[0].header("authorization"), "Bearer sink-secret-1");
    assert_eq!(billed[0].header("x-team"), "payments");
    assert!(!billed[0].header("webhook-signature").is_empty());
    let audited = sink.received("/audit");
    assert_eq!(audited.len(), 1);
    assert!(!audited[0].headers.contains_key("authorization"));
    let debug = format!("{:?}", app.config.destinations["billing"]);
    assert!(!debug.contains("sink-secret-1"), "{debug}");
}
