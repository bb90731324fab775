//! Retention: expired events go, in batches, but never one whose jobs are still pending or
//! in progress; ids outlive bodies when the dedupe window is the longer one.

use chrono::Utc;

use crate::both_backends;
use crate::support::sink::{Answer, Sink};
use crate::support::{spawn_app_with_sink, Backend};
use hookgate::queue::JobStatus;

both_backends!(
    expired_events_are_deleted_but_never_with_unfinished_jobs,
    ids_are_remembered_for_the_dedupe_window_after_bodies_go,
);

fn days(n: i64) -> chrono::DateTime<Utc> {
    Utc::now() + chrono::Duration::days(n)
}

async fn expired_events_are_deleted_but_never_with_unfinished_jobs(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| {
        // Small batches, so the sweep has to loop.
        s.retention.batch = 2;
    })
    .await;
    let done = app.ingest_stripes("evt_old", 5).await;
    app.worker().run_once().await.unwrap();
    // A failing destination keeps this one's billing job pending.
    sink.always("/billing", Answer::status(500));
    let stuck = app.ingest_stripe("evt_stuck").await;
    app.worker().run_once().await.unwrap();
    assert_eq!(app.job(stuck, "billing").await.status, JobStatus::Pending);

    let early = app.reconciler().sweep_at(days(29)).await.unwrap();
    assert_eq!(early.expired_events, 0, "within 30 days nothing goes");

    let report = app.reconciler().sweep_at(days(31)).await.unwrap();
    assert_eq!(report.expired_events, 5, "{report:?}");
    for id in &done {
        assert!(app.store.get_event(*id).await.unwrap().is_none());
        assert!(app.store.jobs_for_event(*id).await.unwrap().is_empty());
    }
    assert!(
        app.store.get_event(stuck).await.unwrap().is_some(),
        "pending jobs keep it"
    );
    assert_eq!(app.store.count_events().await.unwrap(), 1);

    // Once its jobs are finished, it goes too.
    sink.always("/billing", Answer::status(200));
    app.worker().run_once_at(days(1)).await.unwrap();
    let later = app.reconciler().sweep_at(days(31)).await.unwrap();
    assert_eq!(later.expired_events, 1);
    assert_eq!(app.store.count_events().await.unwrap(), 0);
}

async fn ids_are_remembered_for_the_dedupe_window_after_bodies_go(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| {
        s.retention.events = "1day".into();
        s.retention.dedupe_window = "10days".into();
    })
    .await;
    let id = app.ingest_stripe("evt_remembered").await;
    app.worker().run_once().await.unwrap();

    let report = app.reconciler().sweep_at(days(2)).await.unwrap();
    match backend {
        // SQLite's events table is its dedupe key: the row stays, emptied.
        Backend::Sqlite => {
            assert_eq!(report.purged_events, 1);
            assert_eq!(report.expired_events, 0);
            let event = app.store.get_event(id).await.unwrap().expect("row kept");
            assert!(
                event.body.is_empty() && event.headers.is_empty(),
                "content gone"
            );
        }
        // PostgreSQL keeps the key in event_keys: the event goes with its partition.
        Backend::Postgres => {
            assert_eq!(report.expired_events, 1, "{report:?}");
            assert!(report.dropped_partitions >= 2, "{report:?}");
            assert_eq!(report.forgotten_keys, 0);
            assert!(app.store.get_event(id).await.unwrap().is_none());
        }
    }
    assert!(
        app.store.jobs_for_event(id).await.unwrap().is_empty(),
        "history gone"
    );
    let again = app.reconciler().sweep_at(days(2)).await.unwrap();
    assert_eq!(
        again.missing_jobs, 0,
        "purged events are not given jobs again"
    );

    // A provider retry within the dedupe window is still a duplicate.
    let r = app
        .post_stripe(r#"{"id":"evt_remembered","type":"invoice.paid"}"#)
        .await;
    let json: serde_json::Value = r.json().await.unwrap();
    assert_eq!(json["duplicate"], true);
    assert_eq!(json["id"], id.to_string());
    let ids = vec!["evt_remembered".to_string()];
    let stored = app.store.stored_provider_event_ids("stripe", &ids);
    assert_eq!(stored.await.unwrap().len(), 1, "the key is kept");

    let report = app.reconciler().sweep_at(days(11)).await.unwrap();
    let forgotten = match backend {
        Backend::Sqlite => report.expired_events,
        Backend::Postgres => report.forgotten_keys,
    };
    assert_eq!(forgotten, 1, "{report:?}");
    let stored = app.store.stored_provider_event_ids("stripe", &ids);
    assert!(
        stored.await.unwrap().is_empty(),
        "forgotten after the window"
    );
    if backend == Backend::Sqlite {
        // (On PostgreSQL the sweep 11 days ahead dropped today's partitions, so an event
        // received now has nowhere to go: time does not run backwards outside this test.)
        let r = app
            .post_stripe(r#"{"id":"evt_remembered","type":"invoice.paid"}"#)
            .await;
        let json: serde_json::Value = r.json().await.unwrap();
        assert_eq!(json["duplicate"], false, "forgotten after the window");
    }
}
