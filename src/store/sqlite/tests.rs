//! The connection settings each pooled SQLite connection really runs with.

use std::time::Duration;

use super::SqliteStore;
use crate::config::{DatabaseConfig, SqliteSynchronous};

async fn pragma(store: &SqliteStore, name: &str) -> i64 {
    sqlx::query_scalar(&format!("PRAGMA {name}"))
        .fetch_one(&store.pool)
        .await
        .unwrap()
}

fn store(dir: &tempfile::TempDir, level: SqliteSynchronous) -> SqliteStore {
    store_waiting(dir, level, Duration::from_secs(5))
}

fn store_waiting(
    dir: &tempfile::TempDir,
    level: SqliteSynchronous,
    busy_timeout: Duration,
) -> SqliteStore {
    SqliteStore::connect(&DatabaseConfig {
        url: format!("sqlite://{}", dir.path().join("s.db").display()),
        read_url: None,
        max_connections: 1,
        acquire_timeout: Duration::from_secs(5),
        busy_timeout,
        sqlite_synchronous: level,
        partition_interval: Duration::from_secs(86_400),
    })
    .unwrap()
}

#[tokio::test]
async fn the_configured_synchronous_level_and_no_auto_checkpoint_apply() {
    let dir = tempfile::tempdir().unwrap();
    // SQLite's codes: 1 = NORMAL, 2 = FULL.
    assert_eq!(
        pragma(&store(&dir, SqliteSynchronous::Full), "synchronous").await,
        2
    );
    let normal = store(&dir, SqliteSynchronous::Normal);
    assert_eq!(pragma(&normal, "synchronous").await, 1);
    assert_eq!(pragma(&normal, "wal_autocheckpoint").await, 0);
}

/// The scheduling policy of each of this process's threads named `name`, from
/// `/proc/self/task/*/stat` (field 41; 5 is `SCHED_IDLE`), once at least `at_least` are seen.
///
/// One listing of `/proc/self/task` can miss a live thread: the kernel walks the thread list
/// on from the last thread it returned, and stops or skips ahead when that one has exited
/// meanwhile, as the other tests' runtime threads do all the time (CI once saw no checkpoint
/// thread at all). So it lists again, for up to 2 s, until enough are seen, and then returns
/// the last listing whatever it holds.
#[cfg(target_os = "linux")]
fn policies_of_threads_named(name: &str, at_least: usize) -> Vec<u32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let policies = policies_listed_once(name);
        if policies.len() >= at_least || std::time::Instant::now() >= deadline {
            return policies;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(target_os = "linux")]
fn policies_listed_once(name: &str) -> Vec<u32> {
    let mut policies = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let Ok(task) = task else { continue };
        let task = task.path();
        let Ok(comm) = std::fs::read_to_string(task.join("comm")) else {
            continue; // the thread ended meanwhile
        };
        if comm.trim_end() != name {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(task.join("stat")) else {
            continue;
        };
        // Fields after the parenthesised name start at field 3.
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        let policy = after_name.split(' ').nth(41 - 3).unwrap();
        policies.push(policy.parse().unwrap());
    }
    policies
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_run_on_an_idle_priority_thread_and_copy_the_wal() {
    const SCHED_IDLE: u32 = 5;
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, SqliteSynchronous::Normal);
    crate::store::Store::Sqlite(store.clone())
        .migrate()
        .await
        .unwrap();
    let (mut conn, idle) = super::checkpoints::connect_idle(&store.pool.connect_options())
        .await
        .unwrap();
    assert!(idle, "the thread could not take the idle policy");
    let policies = policies_of_threads_named(super::checkpoints::THREAD_NAME, 1);
    assert!(!policies.is_empty(), "no thread named for checkpoints");
    assert!(
        policies.iter().all(|&p| p == SCHED_IDLE),
        "checkpoint threads' policies: {policies:?}"
    );
    // The pooled connections' threads ("sqlx-sqlite-worker-N", cut to 15 bytes) keep theirs.
    let pooled = policies_of_threads_named("sqlx-sqlite-wor", 1);
    assert!(
        !pooled.is_empty() && !pooled.contains(&SCHED_IDLE),
        "{pooled:?}"
    );

    fill(&store, 100_000).await;
    let (frames, copied) = super::checkpoints::checkpoint(&mut conn).await.unwrap();
    assert!(frames > 25, "the WAL held {frames} frames");
    assert_eq!(copied, frames, "a quiet database's WAL is copied whole");

    // The background rounds open such a thread of their own (`conn`'s is still alive).
    let mut checkpointer = checkpointer(&store, 1_000_000);
    let round = checkpointer.round().await.unwrap();
    assert_eq!(round.priority, super::checkpoints::Priority::Idle);
    let policies = policies_of_threads_named(super::checkpoints::THREAD_NAME, 2);
    assert!(
        policies.len() >= 2 && policies.iter().all(|&p| p == SCHED_IDLE),
        "checkpoint threads' policies after a round: {policies:?}"
    );
}

#[test]
fn a_starved_idle_checkpoint_is_followed_by_one_at_normal_priority() {
    use super::checkpoints::{next_priority, Priority, STARVED_AFTER};
    assert_eq!(next_priority(None), Priority::Idle);
    // Rounds come every few tens of ms; one that took many intervals is not yet starved.
    let slow = STARVED_AFTER - Duration::from_millis(1);
    assert_eq!(next_priority(Some((Priority::Idle, slow))), Priority::Idle);
    let starved = STARVED_AFTER + Duration::from_millis(1);
    assert_eq!(
        next_priority(Some((Priority::Idle, starved))),
        Priority::Normal
    );
    // One normal round catches up; the one after is idle again, however long that took.
    assert_eq!(
        next_priority(Some((Priority::Normal, starved))),
        Priority::Idle
    );
}

#[test]
fn rounds_slow_down_while_they_find_nothing_to_copy_or_fail_and_speed_up_when_they_copy() {
    use super::checkpoints::{next_wait, Priority, Round, QUIET_EVERY};
    let every = Duration::from_millis(25);
    let round = |synced_database, restarted| Round {
        priority: Priority::Idle,
        frames: 10,
        restarted,
        synced_database,
    };
    let idle = round(false, false);
    // The waits, in ms, after `n` rounds in a row with this outcome, starting from the interval.
    let waits_after = |outcome: Option<&Round>, n| {
        let mut wait = every;
        (0..n)
            .map(|_| {
                wait = next_wait(wait, every, outcome);
                wait.as_millis()
            })
            .collect::<Vec<_>>()
    };
    let waits = waits_after(Some(&idle), 6);
    assert_eq!(waits, [50, 100, 200, 250, 250, 250]);
    assert_eq!(waits.last(), Some(&QUIET_EVERY.as_millis()));
    // New frames copied, or a restart: back to the interval at once.
    assert_eq!(
        next_wait(QUIET_EVERY, every, Some(&round(true, false))),
        every
    );
    assert_eq!(
        next_wait(QUIET_EVERY, every, Some(&round(false, true))),
        every
    );
    // A failed round backs off as an idle one does, also from the interval.
    assert_eq!(waits_after(None, 5), [50, 100, 200, 250, 250]);
    // An interval longer than the quiet one is kept as it is.
    let slow = Duration::from_secs(1);
    assert_eq!(next_wait(slow, slow, Some(&idle)), slow);
    assert_eq!(next_wait(slow, slow, None), slow);
}

/// Rounds run by hand, restarting the WAL past `restart_after_frames`.
fn checkpointer(
    store: &SqliteStore,
    restart_after_frames: i64,
) -> super::checkpoints::Checkpointer {
    super::checkpoints::Checkpointer::new(
        store.pool.clone(),
        restart_after_frames,
        store.write_turn.clone(),
    )
}

async fn fill(store: &SqliteStore, bytes: usize) {
    sqlx::query("CREATE TABLE IF NOT EXISTS filler (x BLOB)")
        .execute(&store.pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO filler VALUES (zeroblob(?))")
        .bind(bytes as i64)
        .execute(&store.pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_restarts_the_wal_once_it_holds_the_bound_and_no_reader_needs_it() {
    use sqlx::sqlite::SqliteConnection;
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, SqliteSynchronous::Normal);
    crate::store::Store::Sqlite(store.clone())
        .migrate()
        .await
        .unwrap();
    fill(&store, 100_000).await;

    let below = checkpointer(&store, 1_000_000).round().await.unwrap();
    assert!(below.frames > 25 && !below.restarted, "{below:?}");

    fill(&store, 100_000).await;
    let mut bounded = checkpointer(&store, 10);
    let at_bound = bounded.round().await.unwrap();
    assert!(at_bound.restarted, "{at_bound:?}");
    fill(&store, 10).await;
    let (frames, _) = store.checkpoint().await.unwrap();
    assert!(frames < 10, "the next commit was written at frame {frames}");

    // A reader still on an older snapshot: the restart gives up within its short wait
    // (writers are held off meanwhile) instead of the pool's 5 s busy timeout.
    let mut reader = SqliteConnection::connect_with(&store.pool.connect_options())
        .await
        .unwrap();
    let mut snapshot = reader.begin().await.unwrap();
    let _: i64 = sqlx::query_scalar("SELECT count(*) FROM filler")
        .fetch_one(&mut *snapshot)
        .await
        .unwrap();
    fill(&store, 100_000).await;
    let started = std::time::Instant::now();
    let held = bounded.round().await.unwrap();
    assert!(!held.restarted, "{held:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    snapshot.rollback().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_copied_frames_syncs_the_database_file_and_one_with_nothing_new_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, SqliteSynchronous::Full);
    crate::store::Store::Sqlite(store.clone())
        .migrate()
        .await
        .unwrap();
    let mut checkpointer = checkpointer(&store, 1_000_000);
    fill(&store, 100_000).await;
    let copied = checkpointer.round().await.unwrap();
    assert!(copied.frames > 25 && copied.synced_database, "{copied:?}");
    let nothing_new = checkpointer.round().await.unwrap();
    assert!(!nothing_new.synced_database, "{nothing_new:?}");
    // The next write started the WAL over; a bigger one leaves it a different copied count
    // (an equal count reads as nothing new, and SQLite, which reached the end unhindered
    // here, synced the file itself).
    fill(&store, 300_000).await;
    let more = checkpointer.round().await.unwrap();
    assert!(
        more.frames != copied.frames && more.synced_database,
        "{more:?}"
    );
}

/// Whether `task` is still waiting after a while in which, unblocked, it would have finished.
async fn still_waiting<T>(task: &tokio::task::JoinHandle<T>) -> bool {
    tokio::time::sleep(Duration::from_millis(300)).await;
    !task.is_finished()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_restart_and_ingest_take_turns_instead_of_waiting_on_sqlites_lock() {
    use crate::domain::{Name, ProviderEventId};
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, SqliteSynchronous::Normal);
    crate::store::Store::Sqlite(store.clone())
        .migrate()
        .await
        .unwrap();
    fill(&store, 100_000).await;

    // An ingest transaction has the turn: the restart waits for it.
    let ingesting = store.write_turn.clone().lock_owned().await;
    let mut checkpointer = checkpointer(&store, 10);
    let round = tokio::spawn(async move { checkpointer.round().await });
    assert!(
        still_waiting(&round).await,
        "the restart did not wait its turn"
    );
    drop(ingesting);
    let round = round.await.unwrap().unwrap();
    assert!(round.restarted, "{round:?}");

    // A restart has the turn: ingest waits for it, then stores.
    let restarting = store.write_turn.clone().lock_owned().await;
    let writer = store.clone();
    let insert = tokio::spawn(async move {
        let (tenant, source) = (
            Name::parse("tenant", "acme").unwrap(),
            Name::parse("source", "stripe").unwrap(),
        );
        let id = ProviderEventId::parse("evt_1").unwrap();
        let event = crate::store::NewEvent {
            id: crate::domain::EventId::generate(),
            tenant: &tenant,
            source: &source,
            provider_event_id: &id,
            event_type: None,
            received_at: chrono::Utc::now(),
            content_type: None,
            headers_json: "[]".into(),
            body: b"{}",
            verified_scheme: "stripe",
            verified_secret_index: 0,
            destinations: &[],
            delays: &[],
            route_digest: None,
            claims: &[],
            orderings: &[],
        };
        writer.insert_events(&[event]).await
    });
    assert!(still_waiting(&insert).await, "ingest did not wait its turn");
    drop(restarting);
    let outcomes = insert.await.unwrap().unwrap();
    assert!(
        matches!(outcomes[..], [crate::store::InsertOutcome::Created(_)]),
        "{outcomes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_store_closes_the_checkpoint_connections_so_the_wal_is_folded_in_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, SqliteSynchronous::Full);
    crate::store::Store::Sqlite(store.clone())
        .migrate()
        .await
        .unwrap();
    store.spawn_checkpoints(Duration::from_millis(20));
    fill(&store, 100_000).await;
    // Rounds have opened the checkpoint task's connection by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    #[cfg(target_os = "linux")]
    assert!(
        !policies_of_threads_named(super::checkpoints::THREAD_NAME, 1).is_empty(),
        "no checkpoint connection was open to close"
    );
    let wal = dir.path().join("s.db-wal");
    assert!(wal.exists(), "no WAL to begin with");
    store.close().await;
    assert!(!wal.exists(), "the WAL outlived the store's close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_writes_wait_their_turn_too() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, SqliteSynchronous::Normal);
    crate::store::Store::Sqlite(store.clone())
        .migrate()
        .await
        .unwrap();
    // Ingest's writer has the turn: a claim waits for it rather than for SQLite's lock,
    // where a busy handler's growing sleeps once kept workers or ingest out for seconds.
    let ingesting = store.write_turn.clone().lock_owned().await;
    let worker = store.clone();
    let claim = tokio::spawn(async move {
        let now = chrono::Utc::now();
        worker
            .claim_jobs("sink", 10, now, now + chrono::Duration::seconds(30))
            .await
    });
    assert!(
        still_waiting(&claim).await,
        "the claim did not wait its turn"
    );
    drop(ingesting);
    assert!(claim.await.unwrap().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_cannot_get_its_turn_within_the_busy_timeout_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_waiting(&dir, SqliteSynchronous::Normal, Duration::from_millis(200));
    crate::store::Store::Sqlite(store.clone())
        .migrate()
        .await
        .unwrap();
    let _held_on = store.write_turn.clone().lock_owned().await;
    let now = chrono::Utc::now();
    let refused = store
        .claim_jobs("sink", 10, now, now + chrono::Duration::seconds(30))
        .await;
    assert!(
        matches!(refused, Err(crate::store::StoreError::Unavailable(_))),
        "{refused:?}"
    );
}
