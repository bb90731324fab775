//! Bulk replay at scale: 10,000 events in bounded batches, each committed on its own.

use reqwest::Method;
use sqlx::Connection as _;

use crate::both_backends;
use crate::support::sink::Sink;
use crate::support::{spawn_app_with_sink, Backend, TestApp, DEFAULT_TOKEN};
use hookgate::queue::JobStatus;

both_backends!(bulk_replay_of_ten_thousand_events);

const EVENTS: i64 = 10_000;

/// Stores `EVENTS` github events with bulk SQL (no jobs), as if received long ago.
async fn seed(app: &TestApp) {
    match app.backend {
        Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&app.database_url)
                .await
                .unwrap();
            sqlx::raw_sql(&format!(
                "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {EVENTS}) \
                 INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
                    content_type, headers, body, verified_scheme, verified_secret_index) \
                 SELECT printf('00000000-0000-7000-8000-%012x', x), 'default', 'github', \
                    'bulk-' || x, 'push', CAST(strftime('%s', 'now') AS INTEGER) * 1000 - x, \
                    'application/json', '[]', x'7b7d', 'github', 0 FROM n"
            ))
            .execute(&mut c)
            .await
            .unwrap();
        }
        // UUIDv7 ids of the time each was received, as ingest makes them: the partition
        // key; and the dedupe keys ingest would write beside them.
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&app.database_url)
                .await
                .unwrap();
            sqlx::raw_sql(&format!(
                "INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
                    content_type, headers, body, verified_scheme, verified_secret_index) \
                 SELECT (lpad(to_hex(floor(extract(epoch FROM now()) * 1000)::bigint - g), \
                        12, '0') || '7' || substr(md5(g::text), 1, 3) || '8' \
                        || substr(md5(g::text), 4, 15))::uuid, \
                    'default', 'github', 'bulk-' || g, 'push', \
                    now() - g * interval '1 millisecond', 'application/json', '[]'::jsonb, \
                    '\\x7b7d'::bytea, 'github', 0 FROM generate_series(1, {EVENTS}) g; \
                 INSERT INTO event_keys (source, provider_event_id, event_id, received_at) \
                    SELECT source, provider_event_id, id, received_at FROM events"
            ))
            .execute(&mut c)
            .await
            .unwrap();
        }
    }
}

async fn bulk_replay_of_ten_thousand_events(backend: Backend) {
    let sink = Sink::start().await;
    // The production default busy timeout: a writer waits up to 5 s for SQLite's lock.
    let app = spawn_app_with_sink(backend, &sink, |s| s.database.busy_timeout = "5s".into()).await;
    seed(&app).await;
    assert_eq!(app.store.count_events().await.unwrap(), EVENTS);

    let dry = app
        .admin(
            Method::POST,
            DEFAULT_TOKEN,
            "/replay",
            Some(r#"{"source":"github","dry_run":true}"#),
            None,
        )
        .await;
    assert_eq!(dry.status(), 200);
    assert_eq!(
        dry.json::<serde_json::Value>().await.unwrap()["matched"],
        EVENTS
    );
    assert_eq!(
        app.store.count_jobs(JobStatus::Pending).await.unwrap(),
        0,
        "a dry run changes nothing"
    );

    // Webhooks keep arriving while the replay runs: its batches commit one by one, so
    // ingestion is never stuck behind one huge transaction.
    let app = std::sync::Arc::new(app);
    let bulk = Some(r#"{"source":"github"}"#);
    let replay = {
        let app = app.clone();
        tokio::spawn(async move {
            app.admin(
                Method::POST,
                DEFAULT_TOKEN,
                "/replay",
                bulk,
                Some("bulk-10k"),
            )
            .await
        })
    };
    for i in 0..5 {
        let body = format!(r#"{{"during":{i}}}"#);
        let headers = crate::support::signing::github_headers(
            crate::support::GITHUB_SECRET,
            &format!("during-bulk-{i}"),
            body.as_bytes(),
        );
        let r = app.post_webhook("github", &headers, body).await;
        assert_eq!(r.status(), 200, "ingest answered while replaying");
    }
    let r = replay.await.unwrap();
    assert_eq!(r.status(), 202);
    let replayed = r.json::<serde_json::Value>().await.unwrap()["replayed"]
        .as_i64()
        .unwrap();
    // The live events may or may not fall inside the replay's newest-first scan.
    assert!((EVENTS..=EVENTS + 5).contains(&replayed), "{replayed}");
    let pending = app.store.count_jobs(JobStatus::Pending).await.unwrap();
    assert_eq!(
        pending,
        replayed + 5,
        "one job per replayed event, plus the live ones"
    );

    // The retried POST replays nothing more.
    let again = app
        .admin(
            Method::POST,
            DEFAULT_TOKEN,
            "/replay",
            bulk,
            Some("bulk-10k"),
        )
        .await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(
        app.store.count_jobs(JobStatus::Pending).await.unwrap(),
        pending
    );
}
