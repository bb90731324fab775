//! The crash windows of docs/FAILURE-STORY.md, each reproduced against the real store.

use std::time::Duration;

use chrono::Utc;

use crate::both_backends;
use crate::support::raw::RawConn;
use crate::support::{error_code, spawn_app, Backend, TestApp};
use hookgate::domain::{EventId, Name, ProviderEventId};
use hookgate::store::{InsertOutcome, NewEvent};

both_backends!(
    a_failed_job_insert_rolls_back_the_event,
    an_abandoned_transaction_stores_nothing_and_the_retry_stores_the_event,
    committed_but_unanswered_event_is_a_duplicate_on_retry,
);

/// A second connection that can make the gateway's job inserts fail, as a store fault.
pub struct RawConnHandle(tokio::sync::Mutex<RawConn>);

impl RawConnHandle {
    pub async fn open(app: &TestApp) -> Self {
        Self(tokio::sync::Mutex::new(RawConn::open(app).await))
    }

    pub async fn install_job_insert_failure(&self, backend: Backend) {
        let mut conn = self.0.lock().await;
        match backend {
            Backend::Sqlite => {
                conn.exec(
                    "CREATE TRIGGER crash_jobs BEFORE INSERT ON jobs \
                     BEGIN SELECT RAISE(ABORT, 'injected crash'); END",
                )
                .await
            }
            Backend::Postgres => {
                conn.exec(
                    "CREATE FUNCTION crash() RETURNS trigger LANGUAGE plpgsql AS \
                     $$ BEGIN RAISE EXCEPTION 'injected crash'; END $$; \
                     CREATE TRIGGER crash_jobs BEFORE INSERT ON jobs \
                     FOR EACH ROW EXECUTE FUNCTION crash()",
                )
                .await
            }
        }
    }

    /// Backdates a key's record by a day, as if its request had been abandoned long ago.
    pub async fn age_idempotency_key(&self, key: &str) {
        let mut conn = self.0.lock().await;
        let sql = match &*conn {
            RawConn::Sqlite(_) => format!(
                "UPDATE idempotency_keys SET updated_at = updated_at - 86400000 \
                 WHERE idempotency_key = '{key}'"
            ),
            RawConn::Postgres(_) => format!(
                "UPDATE idempotency_keys SET updated_at = updated_at - interval '1 day' \
                 WHERE idempotency_key = '{key}'"
            ),
        };
        conn.exec(&sql).await;
    }

    pub async fn remove_job_insert_failure(&self, backend: Backend) {
        let mut conn = self.0.lock().await;
        match backend {
            Backend::Sqlite => conn.exec("DROP TRIGGER crash_jobs").await,
            // Postgres names triggers per table, and the function is separate.
            Backend::Postgres => conn.exec("DROP FUNCTION crash() CASCADE").await,
        }
    }
}

fn body(id: &str) -> String {
    format!(r#"{{"id":"{id}","type":"charge.succeeded"}}"#)
}

/// Window: after the event row is written, before its jobs are. A trigger makes the job
/// insert fail, as a crash there would stop it: the event must not be left without jobs.
async fn a_failed_job_insert_rolls_back_the_event(backend: Backend) {
    let app = spawn_app(backend).await;
    let conn = RawConnHandle::open(&app).await;
    conn.install_job_insert_failure(backend).await;
    let r = app.post_stripe(&body("evt_half")).await;
    assert_eq!(error_code(r).await, (503, "store_unavailable".into()));
    assert_eq!(
        app.store.count_events().await.unwrap(),
        0,
        "no event without its jobs"
    );

    conn.remove_job_insert_failure(backend).await;
    let r = app.post_stripe(&body("evt_half")).await;
    assert_eq!(r.status(), 200);
    let event = app
        .store
        .find_event("stripe", "evt_half")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(app.store.jobs_for_event(event.id).await.unwrap().len(), 2);
}

/// Window: inside the transaction, before COMMIT. Another connection inserts the same event
/// and never commits (its process "dies": the connection closes). A provider retry arriving
/// meanwhile waits on it, and is stored once the dead transaction is rolled back.
async fn an_abandoned_transaction_stores_nothing_and_the_retry_stores_the_event(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut doomed = RawConn::open(&app).await;
    let now = Utc::now().timestamp_millis();
    match backend {
        Backend::Sqlite => {
            doomed.exec("BEGIN IMMEDIATE").await;
            doomed
                .exec(&format!(
                    "INSERT INTO events (id, tenant, source, provider_event_id, received_at, \
                     headers, body, verified_scheme, verified_secret_index) VALUES \
                     ('{}', 'acme', 'stripe', 'evt_doomed', {now}, '[]', x'00', 'stripe', 0)",
                    EventId::generate()
                ))
                .await;
        }
        // The dedupe key (event_keys) is what the retry waits on, as ingest writes it first.
        Backend::Postgres => {
            let id = EventId::generate();
            doomed.exec("BEGIN").await;
            doomed
                .exec(&format!(
                    "INSERT INTO event_keys (source, provider_event_id, event_id, received_at) \
                     VALUES ('stripe', 'evt_doomed', '{id}', now())"
                ))
                .await;
            doomed
                .exec(&format!(
                    "INSERT INTO events (id, tenant, source, provider_event_id, received_at, \
                     headers, body, verified_scheme, verified_secret_index) VALUES \
                     ('{id}', 'acme', 'stripe', 'evt_doomed', now(), '[]', '\\x00', 'stripe', 0)"
                ))
                .await;
        }
    }

    let submitted = app.batcher.submitted();
    let retry = {
        let client = app.client.clone();
        let url = app.url("/webhooks/stripe");
        let body = body("evt_doomed");
        let headers = crate::support::signing::stripe_headers(
            crate::support::STRIPE_SECRET,
            crate::support::signing::now(),
            body.as_bytes(),
        );
        tokio::spawn(async move {
            let mut req = client.post(url);
            for (k, v) in headers {
                req = req.header(k, v);
            }
            req.body(body).send().await.unwrap()
        })
    };
    // The retry reaches the store (ingest's group commit counts it) and, on PostgreSQL, waits
    // on the doomed transaction's lock, which pg_locks shows. SQLite shows no waiter: its
    // writer waits in the busy handler, right after the submission counted here.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    tokio::time::timeout_at(deadline, app.batcher.submitted_at_least(submitted + 1))
        .await
        .expect("the retry never reached the store");
    if backend == Backend::Postgres {
        let mut observer = RawConn::open(&app).await;
        let waiting = "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                       WHERE NOT l.granted AND a.datname = current_database()";
        while observer.query_i64(waiting).await == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the retry never waited on the open transaction's lock"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    assert!(
        !retry.is_finished(),
        "the retry waits for the open transaction"
    );
    drop(doomed); // the process holding it dies: its transaction is rolled back

    let r = retry.await.unwrap();
    assert_eq!(r.status(), 200);
    let json: serde_json::Value = r.json().await.unwrap();
    assert_eq!(json["duplicate"], false);
    let event = app
        .store
        .find_event("stripe", "evt_doomed")
        .await
        .unwrap()
        .expect("the retry stored the event");
    assert_eq!(event.id.to_string(), json["id"].as_str().unwrap());
    assert_eq!(event.body, body("evt_doomed").as_bytes());
    assert_eq!(app.store.jobs_for_event(event.id).await.unwrap().len(), 2);
}

/// Window: after COMMIT, before the 200 reaches the provider (or the commit's answer was
/// lost). The provider retries; the retry must be answered 200 with the same id and must
/// not queue the jobs twice.
async fn committed_but_unanswered_event_is_a_duplicate_on_retry(backend: Backend) {
    let app = spawn_app(backend).await;
    let payload = body("evt_unanswered");
    let (tenant, source) = (
        Name::parse("tenant", "acme").unwrap(),
        Name::parse("source", "stripe").unwrap(),
    );
    let destinations = [
        Name::parse("d", "billing").unwrap(),
        Name::parse("d", "audit").unwrap(),
    ];
    let provider_event_id = ProviderEventId::parse("evt_unanswered").unwrap();
    // The commit a crashed process made just before it could answer.
    let committed = app
        .store
        .insert_event(&NewEvent {
            event_type: Some("charge.succeeded"),
            content_type: Some("application/json"),
            destinations: &destinations,
            claims: &[],
            orderings: &[],
            ..crate::support::new_event(&tenant, &source, &provider_event_id, payload.as_bytes())
        })
        .await
        .unwrap();
    let InsertOutcome::Created(id) = committed else {
        panic!("first insert must create");
    };

    let r = app.post_stripe(&payload).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    let json: serde_json::Value = r.json().await.unwrap();
    assert_eq!(json["duplicate"], true);
    assert_eq!(json["id"], id.to_string());
    assert_eq!(app.store.count_events().await.unwrap(), 1);
    assert_eq!(app.store.jobs_for_event(id).await.unwrap().len(), 2);
}
