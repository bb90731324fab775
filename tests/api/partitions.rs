//! PostgreSQL's time partitions (docs/decisions/postgres-time-partitions.md): an event, its
//! jobs (replays included) and its attempts live in partitions of one time range, retention
//! drops them whole unless a job in them is unfinished, lookups by id read one partition,
//! and a database of the unpartitioned layout migrates with its rows in place. PostgreSQL
//! only: SQLite keeps its one table per kind (its retention is `retention.rs`).

use chrono::Utc;
use reqwest::Method;
use serde_json::Value;
use sqlx::{PgPool, Row};

use crate::support::postgres::TestDatabase;
use crate::support::sink::{Answer, Sink};
use crate::support::{spawn_app_with, spawn_app_with_sink, Backend, TestApp, ACME_TOKEN};
use hookgate::domain::EventId;
use hookgate::queue::JobStatus;

fn days(n: i64) -> chrono::DateTime<Utc> {
    Utc::now() + chrono::Duration::days(n)
}

async fn pool(app: &TestApp) -> PgPool {
    PgPool::connect(&app.database_url).await.unwrap()
}

/// The partition of an event, and those of its jobs (`tableoid`), for `partitions_of`.
const EVENT_PARTITION: &str = "SELECT tableoid::regclass::text FROM events WHERE id = $1";
const JOB_PARTITIONS: &str = "SELECT tableoid::regclass::text FROM jobs WHERE event_id = $1";

/// The partition holding each row `sql` selects (`tableoid`), distinct.
async fn partitions_of(db: &PgPool, sql: &str, id: EventId) -> Vec<String> {
    let rows = sqlx::query(sql)
        .bind(id.as_uuid())
        .fetch_all(db)
        .await
        .unwrap();
    let mut names: Vec<String> = rows.iter().map(|r| r.get::<String, _>(0)).collect();
    names.sort();
    names.dedup();
    names
}

/// Replays `event` to `destination` through the admin API.
async fn replay(app: &TestApp, event: EventId, destination: &str) {
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/events/{event}/replay"),
            Some(&format!(r#"{{"destinations":["{destination}"]}}"#)),
            None,
        )
        .await;
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());
}

/// The range suffix of a partition name: `events_p202612070000` and
/// `jobs_p202612070000` are one range.
fn range_of(name: &str) -> &str {
    name.rsplit_once('_').map_or(name, |(_, suffix)| suffix)
}

async fn exists(db: &PgPool, relation: &str) -> bool {
    sqlx::query_scalar::<_, Option<String>>("SELECT to_regclass($1)::text")
        .bind(relation)
        .fetch_one(db)
        .await
        .unwrap()
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_its_jobs_and_replays_share_a_partition_that_retention_drops_whole() {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(Backend::Postgres, &sink, |_| {}).await;
    let db = pool(&app).await;
    let done = app.ingest_stripe("evt_part_done").await;
    app.worker().run_once().await.unwrap();
    sink.always("/billing", Answer::status(500));
    let stuck = app.ingest_stripe("evt_part_stuck").await;
    app.worker().run_once().await.unwrap();
    replay(&app, done, "audit").await;
    app.worker().run_once().await.unwrap();

    let event_partition = partitions_of(&db, EVENT_PARTITION, done).await;
    let job_partitions = partitions_of(&db, JOB_PARTITIONS, done).await;
    assert_eq!(event_partition.len(), 1);
    assert_eq!(job_partitions.len(), 1, "the replay's job with the others");
    assert_eq!(range_of(&job_partitions[0]), range_of(&event_partition[0]));
    let jobs_of_done: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE event_id = $1")
        .bind(done.as_uuid())
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(jobs_of_done, 3, "billing, audit and the replay's");
    let ahead: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass")
            .fetch_one(&db)
            .await
            .unwrap();
    assert!(ahead >= 3, "partitions exist days ahead: {ahead}");

    // The stuck job holds its partition: only its settled neighbour goes, in a batch.
    let held = app.reconciler().sweep_at(days(31)).await.unwrap();
    assert!(held.held_partitions >= 1, "{held:?}");
    assert_eq!(held.expired_events, 1, "{held:?}");
    assert_eq!(
        held.forgotten_keys, 1,
        "the held event's key stays: {held:?}"
    );
    let retry = app
        .post_stripe(r#"{"id":"evt_part_stuck","type":"invoice.paid"}"#)
        .await;
    let retry: Value = retry.json().await.unwrap();
    assert_eq!(retry["duplicate"], true, "{retry}");
    assert!(exists(&db, &event_partition[0]).await);
    assert!(app.store.get_event(done).await.unwrap().is_none());
    assert!(app.store.get_event(stuck).await.unwrap().is_some());

    sink.always("/billing", Answer::status(200));
    app.worker().run_once_at(days(1)).await.unwrap();
    assert_eq!(app.job(stuck, "billing").await.status, JobStatus::Succeeded);
    let swept = app.reconciler().sweep_at(days(31)).await.unwrap();
    assert_eq!(swept.expired_events, 1, "{swept:?}");
    assert_eq!(swept.held_partitions, 0, "{swept:?}");
    assert!(!exists(&db, &event_partition[0]).await, "dropped whole");
    assert!(!exists(&db, &job_partitions[0]).await);
    let attempts: i64 = sqlx::query_scalar("SELECT count(*) FROM delivery_attempts")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(
        attempts, 0,
        "attempts go with the partitions before the oldest event's"
    );
    assert_eq!(app.store.count_events().await.unwrap(), 0);
}

/// A replay's job takes its event's time range, not the time of the replay: an event whose
/// id lies in a partition two days ahead (moved there by updating its id, which moves the
/// row) gets, when replayed now, a job in that partition's range. A job id made at the time
/// of the replay would land in the current partition and fail this.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_an_event_in_another_partition_puts_its_job_there() {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(Backend::Postgres, &sink, |_| {}).await;
    let db = pool(&app).await;
    let now_id = app.ingest_stripe("evt_part_elsewhere").await;
    let millis = u64::try_from(days(2).timestamp_millis()).unwrap();
    let moved = EventId::from_uuid(
        uuid::Builder::from_unix_timestamp_millis(millis, &[7u8; 10]).into_uuid(),
    );
    let mut tx = db.begin().await.unwrap();
    for sql in [
        "DELETE FROM jobs WHERE event_id = $1",
        "UPDATE events SET id = $2 WHERE id = $1",
        "UPDATE event_keys SET event_id = $2 WHERE event_id = $1",
    ] {
        sqlx::query(sql)
            .bind(now_id.as_uuid())
            .bind(moved.as_uuid())
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    replay(&app, moved, "audit").await;
    let event_partition = partitions_of(&db, EVENT_PARTITION, moved).await;
    let job_partitions = partitions_of(&db, JOB_PARTITIONS, moved).await;
    assert_eq!(event_partition.len(), 1, "{event_partition:?}");
    assert_eq!(job_partitions.len(), 1, "{job_partitions:?}");
    assert_ne!(range_of(&event_partition[0]), "legacy", "moved ahead");
    assert_eq!(
        range_of(&job_partitions[0]),
        range_of(&event_partition[0]),
        "{job_partitions:?} {event_partition:?}"
    );
    // The job is found through its id like any other, and delivered.
    sink.always("/audit", Answer::status(200));
    app.worker().run_once().await.unwrap();
    assert_eq!(app.job(moved, "audit").await.status, JobStatus::Succeeded);
}

/// A plan node: its type, the relation it reads, and how often it ran (EXPLAIN ANALYZE).
#[derive(Debug)]
struct Node {
    kind: String,
    relation: Option<String>,
    loops: Option<i64>,
}

/// The plan's nodes, depth first.
fn walk(plan: &Value, out: &mut Vec<Node>) {
    out.push(Node {
        kind: plan["Node Type"].as_str().unwrap_or_default().to_owned(),
        relation: plan["Relation Name"].as_str().map(str::to_owned),
        loops: plan["Actual Loops"].as_i64(),
    });
    for child in plan["Plans"].as_array().into_iter().flatten() {
        walk(child, out);
    }
}

async fn plan(db: &mut sqlx::PgConnection, explain: &str) -> Vec<Node> {
    let json: Value = sqlx::query_scalar(explain)
        .fetch_one(&mut *db)
        .await
        .unwrap();
    let mut nodes = Vec::new();
    walk(&json[0]["Plan"], &mut nodes);
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_by_id_reads_one_partition_and_the_claim_reads_only_indexes() {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(Backend::Postgres, &sink, |_| {}).await;
    let id = app.ingest_stripe("evt_plan").await;
    let db = pool(&app).await;
    let mut conn = db.acquire().await.unwrap();

    let by_id = format!("EXPLAIN (FORMAT JSON) SELECT body FROM events WHERE id = '{id}'");
    let read: Vec<_> = plan(&mut conn, &by_id)
        .await
        .into_iter()
        .filter_map(|n| n.relation)
        .collect();
    assert_eq!(read.len(), 1, "one partition: {read:?}");

    // With sequential scans priced out, any left would be a partition no index serves.
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    let claim = format!("PREPARE claim AS {}", hookgate::store::CLAIM_JOBS_SQL);
    sqlx::query(&claim).execute(&mut *conn).await.unwrap();
    sqlx::query("BEGIN").execute(&mut *conn).await.unwrap();
    let nodes = plan(
        &mut conn,
        "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim('billing', now(), 10, \
         now() + interval '1 minute', gen_random_uuid())",
    )
    .await;
    sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
    let scans: Vec<&Node> = nodes.iter().filter(|n| n.relation.is_some()).collect();
    assert!(
        scans.iter().all(|n| n.kind != "Seq Scan"),
        "every partition through an index: {scans:?}"
    );
    // The claimed job's event is read from its partition alone, chosen as the join runs:
    // the other partitions' scans never execute.
    let events_scans: Vec<&&Node> = scans
        .iter()
        .filter(|n| {
            n.relation
                .as_deref()
                .is_some_and(|r| r.starts_with("events_"))
        })
        .collect();
    let events_read = events_scans
        .iter()
        .filter(|n| n.loops.is_some_and(|l| l > 0))
        .count();
    assert_eq!(events_read, 1, "{nodes:?}");
    assert!(
        events_scans.len() > 1,
        "several partitions to choose from: {nodes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpartitioned_database_migrates_with_its_rows_in_place() {
    // The layout before partitions: every migration but the one that partitions.
    let db = TestDatabase::create().await;
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir("migrations/postgres").unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.as_str() < "20261209000001" {
            std::fs::copy(&path, dir.path().join(&name)).unwrap();
        }
    }
    let old = PgPool::connect(db.url()).await.unwrap();
    sqlx::migrate::Migrator::new(dir.path())
        .await
        .unwrap()
        .run(&old)
        .await
        .unwrap();
    let (settled, pending) = (EventId::generate(), EventId::generate());
    for (id, pid) in [(settled, "evt_mig_settled"), (pending, "evt_mig_pending")] {
        sqlx::query(
            "INSERT INTO events (id, tenant, source, provider_event_id, event_type, \
             received_at, headers, body, verified_scheme, verified_secret_index) \
             VALUES ($1, 'acme', 'stripe', $2, 'invoice.paid', now(), '[]', $3, 'hmac', 0)",
        )
        .bind(id.as_uuid())
        .bind(pid)
        .bind(format!(r#"{{"id":"{pid}"}}"#).into_bytes())
        .execute(&old)
        .await
        .unwrap();
    }
    let (done_job, due_job) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    for (job, event, status) in [
        (done_job, settled, "succeeded"),
        (due_job, pending, "pending"),
    ] {
        sqlx::query(
            "INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
             created_at, updated_at) VALUES ($1, $2, 'billing', $3, 0, now(), now(), now())",
        )
        .bind(job)
        .bind(event.as_uuid())
        .bind(status)
        .execute(&old)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO delivery_attempts (id, job_id, attempt, worker_id, started_at, \
         duration_ms, status_code, outcome) VALUES ($1, $2, 1, 'w', now(), 3, 200, 'succeeded')",
    )
    .bind(uuid::Uuid::now_v7())
    .bind(done_job)
    .execute(&old)
    .await
    .unwrap();
    old.close().await;

    let sink = Sink::start().await;
    let billing = sink.url("/billing");
    let url = db.url().to_owned();
    let app = spawn_app_with(Backend::Postgres, move |s, _| {
        for d in &mut s.destinations {
            d.url = billing.clone();
        }
        url
    })
    .await;
    let event = app.store.get_event(settled).await.unwrap().expect("kept");
    assert_eq!(event.body, br#"{"id":"evt_mig_settled"}"#);
    let history = app.store.jobs_for_event(settled).await.unwrap();
    assert_eq!(history.len(), 1);

    // Its dedupe keys came along: a provider's retry is a duplicate of the stored event.
    let r = app
        .post_stripe(r#"{"id":"evt_mig_settled","type":"invoice.paid"}"#)
        .await;
    let json: Value = r.json().await.unwrap();
    assert_eq!(json["duplicate"], true);
    assert_eq!(json["id"], settled.to_string());

    // The pending job of the old layout is delivered from its partition.
    app.worker().run_once().await.unwrap();
    sink.wait_for("/billing", 1, std::time::Duration::from_secs(10))
        .await;
    let job = app.job(pending, "billing").await;
    assert_eq!(job.status, JobStatus::Succeeded);

    let db = pool(&app).await;
    assert!(exists(&db, "events_legacy").await);
    let swept = app.reconciler().sweep_at(days(31)).await.unwrap();
    assert_eq!(swept.expired_events, 2, "{swept:?}");
    assert!(
        !exists(&db, "events_legacy").await,
        "the old table goes whole"
    );
    assert!(!exists(&db, "delivery_attempts_legacy").await);
}
