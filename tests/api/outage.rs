//! When the store cannot commit, the gateway answers 503 with Retry-After and stores
//! nothing; the provider's retry then succeeds once the store is back. A worker whose
//! outcome the store cannot take writes it once the store is back.

use std::net::SocketAddr;
use std::time::Duration;

use sqlx::Connection as _;

use crate::both_backends;
use crate::support::proxy::TcpProxy;
use crate::support::sink::Sink;
use crate::support::{error_code, spawn_app_with, Backend, TestApp};
use hookgate::queue::JobStatus;
use hookgate::worker::CrashPoint;

async fn assert_store_unavailable(app: &TestApp, body: &str) {
    let r = app.post_stripe(body).await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "7");
    assert_eq!(error_code(r).await, (503, "store_unavailable".into()));
    let r = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let r = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200, "the process itself is still alive");
}

async fn assert_stored_after_recovery(app: &TestApp, body: &str, provider_event_id: &str) {
    assert!(
        app.store
            .find_event("stripe", provider_event_id)
            .await
            .unwrap()
            .is_none(),
        "nothing may be stored by a request answered 503"
    );
    let r = app.post_stripe(body).await;
    assert_eq!(r.status(), 200);
    let json: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        json["duplicate"], false,
        "the retry is the first real store"
    );
    let event = app
        .store
        .find_event("stripe", provider_event_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(app.store.jobs_for_event(event.id).await.unwrap().len(), 2);
}

/// A proxy to the test PostgreSQL server, which a test can cut.
async fn postgres_proxy() -> TcpProxy {
    let server = url::Url::parse(&crate::support::postgres::admin_url().await).unwrap();
    let target: SocketAddr = format!(
        "{}:{}",
        server.host_str().unwrap(),
        server.port().unwrap_or(5432)
    )
    .parse()
    .expect("the test server has a numeric address");
    TcpProxy::start(target).await
}

/// `real`, the test database's URL, through `proxy`.
fn through(proxy: &TcpProxy, real: &str) -> String {
    let mut url = url::Url::parse(real).unwrap();
    url.set_port(Some(proxy.addr.port())).unwrap();
    url.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_unreachable_gives_503_and_stores_nothing() {
    // The gateway talks to PostgreSQL through a proxy the test can cut.
    let proxy = postgres_proxy().await;
    let app = spawn_app_with(Backend::Postgres, |_, real| through(&proxy, real)).await;

    let body = r#"{"id":"evt_outage_pg","type":"charge.succeeded"}"#;
    proxy.cut();
    assert_store_unavailable(&app, body).await;
    proxy.restore();
    assert_stored_after_recovery(&app, body, "evt_outage_pg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_write_lock_held_gives_503_and_stores_nothing() {
    let app = spawn_app_with(Backend::Sqlite, |settings, real| {
        settings.database.busy_timeout = "200ms".into();
        real.to_owned()
    })
    .await;
    // Another process holding the write lock past the busy timeout: the store cannot commit.
    let mut locker = sqlx::SqliteConnection::connect(&app.database_url)
        .await
        .unwrap();
    sqlx::raw_sql("BEGIN EXCLUSIVE")
        .execute(&mut locker)
        .await
        .unwrap();
    let body = r#"{"id":"evt_outage_sqlite","type":"charge.succeeded"}"#;
    assert_store_unavailable(&app, body).await;
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut locker)
        .await
        .unwrap();
    assert_stored_after_recovery(&app, body, "evt_outage_sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_its_database_down_at_start_fails_to_build() {
    // serve applies migrations first, so an unreachable database is a start-up error
    // rather than a gateway that answers 503 to everything.
    let mut settings =
        hookgate::config::Settings::from_toml_str(&crate::support::base_config()).unwrap();
    settings.database.url = "postgres://postgres@127.0.0.1:1/none".into();
    settings.database.acquire_timeout = "1s".into();
    assert!(hookgate::startup::Application::build(settings)
        .await
        .is_err());
}

/// Commits never run a WAL checkpoint themselves (a commit that did would stall its whole
/// batch); the background checkpoint (`Store::spawn_maintenance`, every 250 ms in a serving
/// process; called by hand here) copies everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_commits_leave_checkpoints_to_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal.db");
    let store = hookgate::store::SqliteStore::connect(&hookgate::config::DatabaseConfig {
        url: format!("sqlite://{}", path.display()),
        read_url: None,
        max_connections: 2,
        acquire_timeout: std::time::Duration::from_secs(5),
        busy_timeout: std::time::Duration::from_secs(5),
        sqlite_synchronous: hookgate::config::SqliteSynchronous::Full,
        partition_interval: std::time::Duration::from_secs(86_400),
    })
    .unwrap();
    hookgate::store::Store::Sqlite(store.clone())
        .migrate()
        .await
        .unwrap();
    // Past SQLite's default auto-checkpoint size (1,000 pages), one commit at a time.
    let body = vec![b'x'; 4096];
    let (tenant, source) = (
        hookgate::domain::Name::parse("t", "acme").unwrap(),
        hookgate::domain::Name::parse("s", "stripe").unwrap(),
    );
    for i in 0..400 {
        let id = hookgate::domain::ProviderEventId::parse(&format!("evt_wal_{i}")).unwrap();
        let event = crate::support::new_event(&tenant, &source, &id, &body);
        store.insert_events(&[event]).await.unwrap();
    }
    let wal = std::fs::metadata(dir.path().join("wal.db-wal"))
        .unwrap()
        .len();
    assert!(
        wal > 1000 * 4096,
        "the WAL was checkpointed by a commit: {wal} bytes"
    );
    let (frames, copied) = store.checkpoint().await.unwrap();
    assert!(frames > 1000, "{frames} frames");
    assert_eq!(
        copied, frames,
        "a quiet database is checkpointed completely"
    );
}

/// Has the server end every other session on the test's database (as a restart or a
/// failover would); returns how many it ended.
async fn drop_every_session(database_url: &str) -> i64 {
    let mut admin = sqlx::PgConnection::connect(database_url).await.unwrap();
    sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()) t",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap()
}

/// Ingest keeps its connections between batches instead of returning them to the pool.
/// When the server drops every session (a restart, a failover), the batch that meets a dead
/// connection fails as unavailable (the gateway answers 503) and stores nothing, and the next
/// batch meets no dead connection: the failure gave every held one back to the pool to be
/// tested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_ingest_gets_past_dropped_connections_in_one_batch() {
    let app = crate::support::spawn_app(Backend::Postgres).await;
    let store = hookgate::store::Store::connect(&app.config.database).unwrap();
    let (tenant, source) = (
        hookgate::domain::Name::parse("t", "acme").unwrap(),
        hookgate::domain::Name::parse("s", "stripe").unwrap(),
    );
    let ids: Vec<_> = ["evt_held_a", "evt_held_b", "evt_held_c", "evt_held_d"]
        .iter()
        .map(|i| hookgate::domain::ProviderEventId::parse(i).unwrap())
        .collect();
    let event = |i: usize| crate::support::new_event(&tenant, &source, &ids[i], b"{}");
    // Two batches at once: two connections held afterwards.
    let (first, second) = (event(0), event(1));
    let (a, b) = tokio::join!(store.insert_event(&first), store.insert_event(&second));
    a.unwrap();
    b.unwrap();

    let dropped = drop_every_session(&app.database_url).await;
    assert!(dropped >= 2, "{dropped} sessions dropped");

    let failed = store.insert_event(&event(2)).await;
    assert!(
        matches!(failed, Err(hookgate::store::StoreError::Unavailable(_))),
        "{failed:?}"
    );
    store
        .insert_event(&event(3))
        .await
        .expect("the next batch meets no dead connection");
    assert!(store
        .find_event("stripe", "evt_held_c")
        .await
        .unwrap()
        .is_none());
    assert!(store
        .find_event("stripe", "evt_held_d")
        .await
        .unwrap()
        .is_some());
}

/// The worker's claims and outcomes keep their connection between statements too (a pool
/// of their own, `synchronous_commit = off`). After the server drops every session, one
/// claim fails as unavailable and the next one claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_claims_get_past_dropped_connections_in_one_statement() {
    let app = crate::support::spawn_app(Backend::Postgres).await;
    app.ingest_stripes("evt_held_claim", 2).await;
    let now = chrono::Utc::now();
    let lease = now + chrono::Duration::seconds(30);
    let first = app
        .store
        .claim_jobs("billing", 1, now, lease)
        .await
        .unwrap();
    assert_eq!(first.len(), 1, "a connection is held after this claim");

    let dropped = drop_every_session(&app.database_url).await;
    assert!(dropped >= 1, "{dropped} sessions dropped");

    let failed = app.store.claim_jobs("billing", 1, now, lease).await;
    assert!(
        matches!(failed, Err(hookgate::store::StoreError::Unavailable(_))),
        "{failed:?}"
    );
    let second = app
        .store
        .claim_jobs("billing", 1, now, lease)
        .await
        .expect("the next claim meets no dead connection");
    assert_eq!(second.len(), 1);
    assert_ne!(second[0].job_id, first[0].job_id);
}

both_backends!(closing_the_store_does_not_wait_for_held_connections);

/// Ingest keeps its connection after a batch, and the worker's claims theirs; closing the
/// store (at shutdown) must give them back first, or the pool's close would wait forever.
async fn closing_the_store_does_not_wait_for_held_connections(backend: Backend) {
    let app = crate::support::spawn_app(backend).await;
    let store = hookgate::store::Store::connect(&app.config.database).unwrap();
    let (tenant, source) = (
        hookgate::domain::Name::parse("t", "acme").unwrap(),
        hookgate::domain::Name::parse("s", "stripe").unwrap(),
    );
    let id = hookgate::domain::ProviderEventId::parse("evt_held_close").unwrap();
    let destinations = [hookgate::domain::Name::parse("d", "billing").unwrap()];
    let event = hookgate::store::NewEvent {
        destinations: &destinations,
        claims: &[],
        orderings: &[],
        ..crate::support::new_event(&tenant, &source, &id, b"{}")
    };
    store.insert_events(&[event]).await.unwrap();
    // The worker's statements keep a connection of their own too.
    let now = chrono::Utc::now();
    let claimed = store
        .claim_jobs("billing", 1, now, now + chrono::Duration::seconds(30))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    tokio::time::timeout(std::time::Duration::from_secs(10), store.close())
        .await
        .expect("close waited for a held connection");
}

/// What keeps the store from taking a write while a test says so.
enum Outage {
    /// PostgreSQL, reached through a proxy that is cut.
    Cut(TcpProxy),
    /// SQLite, its write lock held by another connection past the busy timeout.
    Locked(Option<sqlx::SqliteConnection>),
}

impl Outage {
    async fn begin(&mut self, app: &TestApp) {
        match self {
            Outage::Cut(proxy) => proxy.cut(),
            Outage::Locked(locker) => {
                let mut conn = sqlx::SqliteConnection::connect(&app.database_url)
                    .await
                    .unwrap();
                sqlx::raw_sql("BEGIN EXCLUSIVE")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                *locker = Some(conn);
            }
        }
    }

    async fn end(&mut self) {
        match self {
            Outage::Cut(proxy) => proxy.restore(),
            Outage::Locked(locker) => {
                let mut conn = locker.take().expect("the lock is held");
                sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.unwrap();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_outcome_the_store_could_not_take_is_written_once_it_is_back() {
    let sink = Sink::start().await;
    let proxy = postgres_proxy().await;
    let app = spawn_app_with(Backend::Postgres, |settings, real| {
        to_sink(settings, &sink);
        through(&proxy, real)
    })
    .await;
    outcome_written_once_the_store_is_back(&app, &sink, Outage::Cut(proxy)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_an_outcome_the_store_could_not_take_is_written_once_it_is_back() {
    let sink = Sink::start().await;
    let app = spawn_app_with(Backend::Sqlite, |settings, real| {
        to_sink(settings, &sink);
        settings.database.busy_timeout = "200ms".into();
        real.to_owned()
    })
    .await;
    outcome_written_once_the_store_is_back(&app, &sink, Outage::Locked(None)).await;
}

fn to_sink(settings: &mut hookgate::config::Settings, sink: &Sink) {
    settings.sources.retain(|src| src.name == "svix");
    for d in &mut settings.destinations {
        d.url = sink.url(&format!("/{}", d.name));
    }
}

/// The destination has answered, and the outcome's write fails for a reason a retry gets
/// past: the worker tries again until the store is back, so the job ends on its first
/// attempt and the destination gets it once, instead of the lease running out and the
/// job going out again.
async fn outcome_written_once_the_store_is_back(app: &TestApp, sink: &Sink, mut outage: Outage) {
    let event = app.ingest_svix("msg_outcome_outage").await;
    let worker = std::sync::Arc::new(app.worker());
    let answered = worker.crash_points().hold(CrashPoint::BeforeOutcome);
    let retrying = worker.crash_points().hold(CrashPoint::OutcomeRetry);
    let delivering = {
        let worker = worker.clone();
        tokio::spawn(async move { worker.run_once().await.unwrap() })
    };
    answered.reached.notified().await;
    outage.begin(app).await;
    answered.release.notify_one();
    tokio::time::timeout(Duration::from_secs(20), retrying.reached.notified())
        .await
        .expect("the failed outcome write is tried again");
    outage.end().await;
    retrying.release.notify_one();

    assert_eq!(delivering.await.unwrap(), 1);
    let job = app.job(event, "billing").await;
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(job.attempts, 1);
    let history = app.store.attempts_for_job(job.id).await.unwrap();
    let outcomes: Vec<&str> = history.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["succeeded"]);
    assert_eq!(sink.received("/billing").len(), 1, "delivered once");
}
