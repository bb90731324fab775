//! Crash window D7 of docs/FAILURE-STORY.md: an event without a job for a destination its
//! source routes to (routing changed since) gets one from the reconciler, read in bounded
//! steps.

use chrono::{DateTime, Duration, Utc};
use sqlx::Connection;

use crate::both_backends;
use crate::support::sink::Sink;
use crate::support::{spawn_app_with_sink, Backend, TestApp};
use hookgate::domain::EventId;
use hookgate::store::{ArrivalCursor, Store};

both_backends!(
    the_reconciler_creates_missing_jobs,
    later_sweeps_look_back_to_the_previous_sweep,
    the_sweep_reads_events_in_bounded_steps_and_misses_none_that_share_a_time,
    a_step_of_the_sweep_reads_at_most_its_limit_and_says_where_to_go_on,
);

/// Stores an event with no jobs, as if its source gained destinations since.
async fn insert_orphan(app: &TestApp, id: &str, received_at: chrono::DateTime<Utc>) -> EventId {
    let (tenant, source) = (
        hookgate::domain::Name::parse("t", "acme").unwrap(),
        hookgate::domain::Name::parse("s", "stripe").unwrap(),
    );
    let id = hookgate::domain::ProviderEventId::parse(id).unwrap();
    let outcome = app
        .store
        .insert_event(&hookgate::store::NewEvent {
            received_at,
            ..crate::support::new_event(&tenant, &source, &id, b"{}")
        })
        .await
        .unwrap();
    let hookgate::store::InsertOutcome::Created(event) = outcome else {
        panic!("{outcome:?}")
    };
    event
}

async fn the_reconciler_creates_missing_jobs(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let event = insert_orphan(&app, "evt_orphan", Utc::now()).await;
    let report = app.reconciler().sweep().await.unwrap();
    assert_eq!(report.missing_jobs, 2);
    assert_eq!(app.store.jobs_for_event(event).await.unwrap().len(), 2);
    let again = app.reconciler().sweep().await.unwrap();
    assert_eq!(again.missing_jobs, 0, "repairs are not repeated");
    app.worker().run_once().await.unwrap();
    assert_eq!(sink.received("/billing").len(), 1);
    assert_eq!(sink.received("/audit").len(), 1);
}

/// After its first sweep (which covers `worker.reconcile_lookback`), a reconciler looks for
/// missing jobs at most every ten minutes, back to its previous look less a margin for late
/// commits: an event that commits late is still repaired, while older events are left to the
/// first sweep of the next start.
async fn later_sweeps_look_back_to_the_previous_sweep(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let reconciler = app.reconciler();
    let first = Utc::now();
    assert_eq!(reconciler.sweep_at(first).await.unwrap().missing_jobs, 0);
    let late = insert_orphan(&app, "evt_late", first - Duration::minutes(5)).await;
    let old = insert_orphan(&app, "evt_old", first - Duration::hours(2)).await;
    let soon = reconciler.sweep_at(first + Duration::seconds(30)).await;
    assert_eq!(soon.unwrap().missing_jobs, 0, "not looked for again yet");
    assert!(app.store.jobs_for_event(late).await.unwrap().is_empty());

    let second = reconciler
        .sweep_at(first + Duration::minutes(10))
        .await
        .unwrap();
    assert_eq!(second.missing_jobs, 2, "the late event's two jobs");
    assert_eq!(jobs_of(&app.store, late).await, ["audit", "billing"]);
    assert!(app.store.jobs_for_event(old).await.unwrap().is_empty());
    let restarted = app.reconciler().sweep().await.unwrap();
    assert_eq!(
        restarted.missing_jobs, 2,
        "a new process looks back the whole lookback"
    );
    assert_eq!(app.store.jobs_for_event(old).await.unwrap().len(), 2);
}

/// SQLite keeps milliseconds.
fn whole_millis(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap()
}

async fn jobs_of(store: &Store, event: EventId) -> Vec<String> {
    let mut d: Vec<String> = store
        .jobs_for_event(event)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.destination)
        .collect();
    d.sort();
    d
}

/// Seven orphans, five of them received at the same instant, swept two events per step: the
/// steps' boundaries fall between events that share a timestamp, and every one of them gets
/// both of its jobs, once.
async fn the_sweep_reads_events_in_bounded_steps_and_misses_none_that_share_a_time(
    backend: Backend,
) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let at = Utc::now() - Duration::seconds(10);
    let mut orphans = Vec::new();
    for i in 0..5 {
        orphans.push(insert_orphan(&app, &format!("evt_same_{i}"), at).await);
    }
    orphans.push(insert_orphan(&app, "evt_before", at - Duration::seconds(1)).await);
    orphans.push(insert_orphan(&app, "evt_after", at + Duration::seconds(1)).await);

    let reconciler = app.reconciler().with_missing_jobs_step(2);
    let report = reconciler.sweep().await.unwrap();
    assert_eq!(report.missing_jobs, 14, "two jobs for each of seven events");
    for event in orphans {
        assert_eq!(jobs_of(&app.store, event).await, ["audit", "billing"]);
    }
    let again = app.reconciler().with_missing_jobs_step(2).sweep().await;
    assert_eq!(again.unwrap().missing_jobs, 0);
}

async fn a_step_of_the_sweep_reads_at_most_its_limit_and_says_where_to_go_on(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let at = whole_millis(Utc::now() - Duration::seconds(10));
    let mut orphans = Vec::new();
    for i in 0..3 {
        orphans
            .push(insert_orphan(&app, &format!("evt_step_{i}"), at + Duration::seconds(i)).await);
    }
    let digest = app.config.sources["stripe"].routes.digest();
    let step = |after| app.store.reroute_scan("stripe", digest, after, 2);

    let first = step(ArrivalCursor::starting_at(at)).await.unwrap();
    let read: Vec<EventId> = first.stale.iter().map(|e| e.id).collect();
    assert_eq!(read, orphans[..2]);
    let cursor = first.next.expect("more events after the first two");
    assert_eq!(cursor.received_at, at + Duration::seconds(1));
    let second = step(cursor).await.unwrap();
    let read: Vec<EventId> = second.stale.iter().map(|e| e.id).collect();
    assert_eq!(
        (read.as_slice(), second.next),
        (&orphans[2..], None),
        "the last event, then the end"
    );
    let past_the_end = step(ArrivalCursor::starting_at(Utc::now())).await.unwrap();
    assert!(past_the_end.stale.is_empty() && past_the_end.next.is_none());
}

/// SQLite: once the events carry the current digest, a step reads no body and writes
/// nothing, so it takes no write lock: it neither waits for the ingest writer nor holds it
/// off. Here another connection holds the write lock past the busy timeout throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_step_with_nothing_missing_does_not_take_the_write_lock() {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(Backend::Sqlite, &sink, |s| {
        s.database.busy_timeout = "200ms".into()
    })
    .await;
    let at = Utc::now() - Duration::seconds(10);
    let event = insert_orphan(&app, "evt_repaired", at).await;
    assert_eq!(app.reconciler().sweep().await.unwrap().missing_jobs, 2);

    let mut locker = sqlx::SqliteConnection::connect(&app.database_url)
        .await
        .unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut locker)
        .await
        .unwrap();
    let digest = app.config.sources["stripe"].routes.digest();
    let start = ArrivalCursor::starting_at(at);
    let step = app.store.reroute_scan("stripe", digest, start, 10).await;
    let created = app
        .store
        .create_missing_jobs(&[], digest, &[], Utc::now())
        .await;
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut locker)
        .await
        .unwrap();
    let step = step.expect("read while another connection holds the write lock");
    assert!(step.stale.is_empty() && step.next.is_none());
    assert_eq!(created.unwrap(), 0);
    assert_eq!(jobs_of(&app.store, event).await, ["audit", "billing"]);
}
