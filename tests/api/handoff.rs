//! Local hand-off: in a process that ingests and delivers, ingest claims a new job for its
//! own workers in the transaction that creates it, when they have room and no backlog.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use crate::both_backends;
use crate::group_commit::one_batch;
use crate::support::sink::Sink;
use crate::support::{spawn_app_with_sink, Backend, TestApp};
use hookgate::domain::EventId;
use hookgate::queue::JobStatus;

both_backends!(
    ingest_hands_new_jobs_to_a_worker_with_room,
    jobs_go_through_the_queue_until_the_worker_has_caught_up,
    a_handed_off_job_whose_process_died_is_delivered_after_its_lease,
    copies_in_one_batch_hand_off_one_set_of_jobs_and_give_back_the_rest,
    a_running_worker_starts_handed_off_jobs_while_it_waits,
);

/// The (status, attempts) of `event`'s billing and audit jobs.
async fn jobs(app: &TestApp, event: EventId) -> [(JobStatus, i32); 2] {
    let billing = app.job(event, "billing").await;
    let audit = app.job(event, "audit").await;
    [
        (billing.status, billing.attempts),
        (audit.status, audit.attempts),
    ]
}

const CLAIMED: [(JobStatus, i32); 2] = [(JobStatus::InProgress, 1), (JobStatus::InProgress, 1)];
const QUEUED: [(JobStatus, i32); 2] = [(JobStatus::Pending, 0), (JobStatus::Pending, 0)];

async fn ingest_hands_new_jobs_to_a_worker_with_room(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let worker = app.worker();
    app.batcher.hand_off_to(worker.handoff());

    // Before the worker has looked at the queue, nothing is handed to it.
    let early = app.ingest_stripe("evt_before_the_worker_ran").await;
    assert_eq!(jobs(&app, early).await, QUEUED);
    assert_eq!(
        worker.run_once().await.unwrap(),
        2,
        "claimed from the queue"
    );

    // Now it has room and no backlog: the jobs are claimed as they are created.
    let event = app.ingest_stripe("evt_handed_off").await;
    assert_eq!(
        jobs(&app, event).await,
        CLAIMED,
        "claimed in the ingest commit"
    );
    assert_eq!(worker.run_once().await.unwrap(), 2, "the two handed off");
    for path in ["/billing", "/audit"] {
        let got = sink.received(path);
        assert_eq!(got.len(), 2, "{path}");
        assert_eq!(got[1].header("webhook-id"), event.to_string());
        assert_eq!(got[1].header("hookgate-attempt"), "1");
    }
    assert_eq!(
        jobs(&app, event).await,
        [(JobStatus::Succeeded, 1), (JobStatus::Succeeded, 1)]
    );
    let billing = app.job(event, "billing").await;
    let history = app.store.attempts_for_job(billing.id).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].status_code, Some(200));
}

async fn jobs_go_through_the_queue_until_the_worker_has_caught_up(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| s.worker.concurrency = 1).await;
    let worker = app.worker();
    app.batcher.hand_off_to(worker.handoff());
    app.ingest_stripe("evt_backlog_0").await;
    app.ingest_stripe("evt_backlog_1").await;

    // One slot, four due jobs: the claim fills it, so the worker is behind.
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let behind = app.ingest_stripe("evt_while_behind").await;
    assert_eq!(jobs(&app, behind).await, QUEUED, "older due jobs go first");

    let mut delivered = 1;
    while delivered < 6 {
        let n = worker.run_once().await.unwrap();
        assert!(n > 0, "the queue drains");
        delivered += n;
    }
    // A claim found less than its room: the worker has caught up, and the next job is
    // handed to it.
    assert_eq!(worker.run_once().await.unwrap(), 0);
    let caught_up = app.ingest_stripe("evt_caught_up").await;
    let [billing, audit] = jobs(&app, caught_up).await;
    assert_eq!(
        [billing, audit]
            .iter()
            .filter(|j| **j == CLAIMED[0])
            .count(),
        1,
        "one slot: one job handed off, the other queued ({billing:?}, {audit:?})"
    );
}

async fn a_handed_off_job_whose_process_died_is_delivered_after_its_lease(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let doomed = app.worker();
    app.batcher.hand_off_to(doomed.handoff());
    doomed.run_once().await.unwrap();
    let event = app.ingest_stripe("evt_handed_to_the_dead").await;
    assert_eq!(jobs(&app, event).await, CLAIMED);
    // The process dies after the commit, before any attempt.
    drop(doomed);

    // While the lease holds, nobody else may take the jobs.
    assert_eq!(app.worker().run_once().await.unwrap(), 0);
    let after_lease = Utc::now() + chrono::Duration::seconds(31);
    let report = app.reconciler().sweep_at(after_lease).await.unwrap();
    assert_eq!(report.expired_leases, 2);
    assert_eq!(app.worker().run_once_at(after_lease).await.unwrap(), 2);
    for path in ["/billing", "/audit"] {
        let got = sink.received(path);
        assert_eq!(got.len(), 1, "{path} got it once");
        assert_eq!(got[0].header("webhook-id"), event.to_string());
    }
    let [(billing, _), (audit, _)] = jobs(&app, event).await;
    assert_eq!(
        (billing, audit),
        (JobStatus::Succeeded, JobStatus::Succeeded)
    );
}

async fn copies_in_one_batch_hand_off_one_set_of_jobs_and_give_back_the_rest(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| s.worker.concurrency = 4).await;
    let app = Arc::new(app);
    let worker = app.worker();
    app.batcher.hand_off_to(worker.handoff());
    worker.run_once().await.unwrap();

    // Each copy reserves two of the four slots; only the stored one keeps them.
    let answers = one_batch(&app, &["evt_twice", "evt_twice"]).await;
    assert!(answers.iter().all(|(s, _, _)| *s == 200), "{answers:?}");
    let event = EventId::parse(answers[0].1["id"].as_str().unwrap()).unwrap();
    assert_eq!(jobs(&app, event).await, CLAIMED);
    assert_eq!(app.store.jobs_for_event(event).await.unwrap().len(), 2);
    assert_eq!(worker.run_once().await.unwrap(), 2);

    // Had the copy kept its slots, two events' four jobs would not all find one.
    let answers = one_batch(&app, &["evt_third", "evt_fourth"]).await;
    for (status, body, _) in &answers {
        assert_eq!(*status, 200);
        let id = EventId::parse(body["id"].as_str().unwrap()).unwrap();
        assert_eq!(jobs(&app, id).await, CLAIMED);
    }
    assert_eq!(worker.run_once().await.unwrap(), 4);
    assert_eq!(sink.received("/billing").len(), 3);
}

async fn a_running_worker_starts_handed_off_jobs_while_it_waits(backend: Backend) {
    let sink = Sink::start().await;
    // A poll interval far beyond the test: only a hand-off or a wake-up can start a job.
    let app = spawn_app_with_sink(backend, &sink, |s| s.worker.poll_interval = "1h".into()).await;
    let worker = Arc::new(app.worker());
    app.batcher.hand_off_to(worker.handoff());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(worker.clone().run(stopped));

    // The first event may arrive before the loop's first claim (then it is queued and
    // claimed); after its delivery the loop has looked and found no backlog.
    app.ingest_stripe("evt_first").await;
    assert_eq!(
        sink.wait_for("/billing", 1, Duration::from_secs(10))
            .await
            .len(),
        1
    );
    let event = app.ingest_stripe("evt_second").await;
    // Claimed in the ingest commit: never seen pending (a queued job would be, until the
    // loop woke and claimed it).
    let billing = app.job(event, "billing").await;
    assert_ne!(billing.status, JobStatus::Pending, "handed off, not queued");
    let got = sink.wait_for("/billing", 2, Duration::from_secs(10)).await;
    assert_eq!(
        got.len(),
        2,
        "the handed-off job was started by the waiting loop"
    );
    assert_eq!(got[1].header("webhook-id"), event.to_string());
    stop.send(true).unwrap();
    running.await.unwrap();
}
