//! `database.read_url`: the admin listings (events, dead letters, undelivered) read from a
//! streaming replica, while ingest, claims, writes and single-record reads stay on the
//! primary. PostgreSQL only: SQLite has no replicas, and `hookgate check` refuses the key
//! there (`cli::check_rejects_bad_configs_naming_the_key`).
//!
//! The test kit starts a primary and a streaming replica of its own; pausing the replica's
//! WAL replay shows which one a read went to.

use std::time::Duration;

use hookgate::domain::EventId;
use reqwest::Method;
use serde_json::Value;

use crate::support::pgcluster::{find_pg_bin, free_port, Cluster, DB_NAME};
use crate::support::{spawn_app_with, Backend, TestApp, ACME_TOKEN};

/// The event ids the admin listing shows (newest first).
async fn listed(app: &TestApp) -> Vec<String> {
    let page = app.admin_json(ACME_TOKEN, "/events?limit=100").await;
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Polls the listing until it shows `event`, for at most `within`.
async fn until_listed(app: &TestApp, event: EventId, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while !listed(app).await.contains(&event.to_string()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{event} not listed after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn on_replica(replica: &Cluster, sql: &str) {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(&replica.url("postgres"))
        .await
        .unwrap();
    sqlx::query(sql).execute(&mut conn).await.unwrap();
    let _ = conn.close().await;
}

// Multi-threaded like every test here: stopping the server on drop needs the runtime's
// other thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_listings_read_from_the_replica_and_everything_else_from_the_primary() {
    let bin = find_pg_bin().expect("PostgreSQL's binaries (initdb, pg_basebackup)");
    let dir = tempfile::tempdir().unwrap();
    // The clusters run as the postgres user, which must reach their directories.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let primary = Cluster::start(&bin, &dir.path().join("primary"), free_port().unwrap())
        .await
        .unwrap();
    let replica =
        Cluster::start_replica(&primary, &dir.path().join("replica"), free_port().unwrap())
            .await
            .unwrap();
    let (primary_url, replica_url) = (primary.url(DB_NAME), replica.url(DB_NAME));
    let app = spawn_app_with(Backend::Postgres, move |s, _| {
        s.database.read_url = Some(replica_url);
        primary_url
    })
    .await;

    let first = app.ingest_stripe("evt_replica_first").await;
    until_listed(&app, first, Duration::from_secs(30)).await;

    // With the replica's replay paused, a new event is stored (on the primary) and readable
    // by id, but the listing (on the replica) does not show it yet.
    on_replica(&replica, "SELECT pg_wal_replay_pause()").await;
    let second = app.ingest_stripe("evt_replica_second").await;
    let one: Value = app
        .admin_json(ACME_TOKEN, &format!("/events/{second}"))
        .await;
    assert_eq!(one["id"], second.to_string());
    assert!(
        !listed(&app).await.contains(&second.to_string()),
        "the listing read the primary"
    );
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/events/{second}/replay"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status(), 202, "writes go to the primary");

    on_replica(&replica, "SELECT pg_wal_replay_resume()").await;
    until_listed(&app, second, Duration::from_secs(30)).await;
    drop(app);
    drop(replica);
    drop(primary);
}
