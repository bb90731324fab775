//! The delivery crash windows of docs/FAILURE-STORY.md: a worker stopped dead at each one
//! leads to exactly one later redelivery with the same webhook-id, and no job stays stuck.

use std::collections::HashMap;

use chrono::Utc;

use crate::both_backends;
use crate::support::sink::Sink;
use crate::support::{spawn_app_with_sink, Backend, TestApp};
use hookgate::domain::EventId;
use hookgate::queue::JobStatus;
use hookgate::store::{AttemptOutcome, AttemptRecord, JobOutcome, JobUpdate};
use hookgate::worker::CrashPoint;

both_backends!(
    outcomes_written_together_are_fenced_one_by_one,
    crash_after_claim_redelivers_once,
    crash_after_send_redelivers_once,
    crash_before_outcome_redelivers_once,
    crash_during_reconciliation_is_finished_by_the_next_sweep,
    a_lost_lease_cannot_overwrite_the_newer_result,
    graceful_shutdown_hands_unfinished_jobs_back,
);

/// The lease in the test config is the default 30 s.
fn after_lease() -> chrono::DateTime<Utc> {
    Utc::now() + chrono::Duration::seconds(31)
}

async fn assert_nothing_stuck(app: &TestApp) {
    for status in [JobStatus::Pending, JobStatus::InProgress] {
        assert_eq!(app.store.count_jobs(status).await.unwrap(), 0, "{status:?}");
    }
}

/// Arms `point` on a first worker, which then "dies" holding the billing job; the
/// reconciler returns it after the lease, and a second worker delivers it.
async fn crash_and_recover(backend: Backend, point: CrashPoint, deliveries_before: usize) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| {
        s.sources.retain(|src| src.name == "svix");
    })
    .await;
    let event = app.ingest_svix("msg_crash").await;
    let doomed = app.worker();
    doomed.crash_points().arm(point, 1);
    doomed.run_once().await.unwrap();

    let job = app.job(event, "billing").await;
    assert_eq!(
        job.status,
        JobStatus::InProgress,
        "the crashed worker held it"
    );
    assert_eq!(sink.received("/billing").len(), deliveries_before);
    // While the lease holds, nobody else may take it.
    assert_eq!(app.worker().run_once().await.unwrap(), 0);

    let report = app.reconciler().sweep_at(after_lease()).await.unwrap();
    assert_eq!(report.expired_leases, 1);
    let job = app.job(event, "billing").await;
    assert_eq!(job.status, JobStatus::Pending);
    assert_eq!(job.attempts, 1, "the lost attempt counts");

    let survivor = app.worker();
    assert_eq!(survivor.run_once_at(after_lease()).await.unwrap(), 1);
    let received = sink.received("/billing");
    assert_eq!(
        received.len(),
        deliveries_before + 1,
        "exactly one redelivery"
    );
    assert!(received
        .iter()
        .all(|r| r.header("webhook-id") == event.to_string()));
    let job = app.job(event, "billing").await;
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(job.attempts, 2);
    let outcomes = outcomes(&app, job.id).await;
    assert_eq!(outcomes, ["lease_expired", "succeeded"]);
    assert_nothing_stuck(&app).await;
}

/// The job's attempt history, as outcome names in order.
async fn outcomes(app: &TestApp, job: hookgate::domain::JobId) -> Vec<String> {
    let history = app.store.attempts_for_job(job).await.unwrap();
    history.into_iter().map(|a| a.outcome).collect()
}

async fn crash_after_claim_redelivers_once(backend: Backend) {
    crash_and_recover(backend, CrashPoint::AfterClaim, 0).await;
}

async fn crash_after_send_redelivers_once(backend: Backend) {
    crash_and_recover(backend, CrashPoint::AfterSend, 1).await;
}

async fn crash_before_outcome_redelivers_once(backend: Backend) {
    crash_and_recover(backend, CrashPoint::BeforeOutcome, 1).await;
}

async fn crash_during_reconciliation_is_finished_by_the_next_sweep(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| {
        s.sources.retain(|src| src.name == "svix");
    })
    .await;
    let events = [
        app.ingest_svix("msg_a").await,
        app.ingest_svix("msg_b").await,
    ];
    let doomed = app.worker();
    doomed.crash_points().arm(CrashPoint::AfterClaim, 2);
    assert_eq!(doomed.run_once().await.unwrap(), 2);

    let reconciler = app.reconciler();
    reconciler
        .crash_points()
        .arm(CrashPoint::ReconcileAfterRepair, 1);
    let first = reconciler.sweep_at(after_lease()).await.unwrap();
    assert_eq!(first.expired_leases, 1, "stopped after one repair");
    assert_eq!(
        app.store.count_jobs(JobStatus::InProgress).await.unwrap(),
        1
    );
    let second = app.reconciler().sweep_at(after_lease()).await.unwrap();
    assert_eq!(second.expired_leases, 1, "the next sweep finishes the job");

    app.worker().run_once_at(after_lease()).await.unwrap();
    let received = sink.received("/billing");
    let mut per_id: HashMap<String, usize> = HashMap::new();
    for r in &received {
        *per_id.entry(r.header("webhook-id").to_owned()).or_default() += 1;
    }
    for e in events {
        assert_eq!(per_id.get(&e.to_string()), Some(&1), "{per_id:?}");
    }
    assert_nothing_stuck(&app).await;
}

async fn a_lost_lease_cannot_overwrite_the_newer_result(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| {
        s.sources.retain(|src| src.name == "svix");
    })
    .await;
    let event = app.ingest_svix("msg_fenced").await;
    let now = Utc::now();
    let lease = chrono::Duration::seconds(30);
    // A slow worker claims the job, then stalls past its lease.
    let slow = app
        .store
        .claim_jobs("billing", 10, now, now + lease)
        .await
        .unwrap();
    assert_eq!(slow.len(), 1);
    app.reconciler().sweep_at(after_lease()).await.unwrap();
    // A second worker takes the job over and finds the destination answering 410.
    let fresh = app
        .store
        .claim_jobs("billing", 10, after_lease(), after_lease() + lease)
        .await
        .unwrap();
    assert_eq!(fresh.len(), 1);
    assert_ne!(fresh[0].claim_token, slow[0].claim_token);
    let record = |attempt, outcome| AttemptRecord {
        attempt,
        worker_id: "test".into(),
        started_at: Utc::now(),
        duration_ms: 1,
        status_code: Some(410),
        error: None,
        outcome,
    };
    assert!(app
        .store
        .finish_job(
            fresh[0].job_id,
            fresh[0].claim_token,
            JobUpdate::Failed,
            &record(fresh[0].attempt, AttemptOutcome::Failed),
            Utc::now()
        )
        .await
        .unwrap());
    // The slow worker wakes up with its stale claim and reports success: refused.
    let applied = app
        .store
        .finish_job(
            slow[0].job_id,
            slow[0].claim_token,
            JobUpdate::Succeeded,
            &record(slow[0].attempt, AttemptOutcome::Succeeded),
            Utc::now(),
        )
        .await
        .unwrap();
    assert!(!applied);
    let job = app.job(event, "billing").await;
    assert_eq!(job.status, JobStatus::Failed, "the newer outcome stands");
    let outcomes = outcomes(&app, job.id).await;
    assert_eq!(outcomes, ["lease_expired", "failed", "lease_lost"]);
    // Renewal is fenced the same way.
    assert!(!app
        .store
        .renew_lease(slow[0].job_id, slow[0].claim_token, after_lease())
        .await
        .unwrap());
}

/// Workers write outcomes in batches (group commit): each outcome in a batch is fenced by
/// its own claim token, and a stale one is recorded as `lease_lost` without failing the rest.
async fn outcomes_written_together_are_fenced_one_by_one(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| {
        s.sources.retain(|src| src.name == "svix");
    })
    .await;
    let events = [
        app.ingest_svix("msg_batch_a").await,
        app.ingest_svix("msg_batch_b").await,
        app.ingest_svix("msg_batch_c").await,
    ];
    let now = Utc::now();
    let claimed = app
        .store
        .claim_jobs("billing", 10, now, now + chrono::Duration::seconds(30))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    let by_event = |e: EventId| claimed.iter().find(|j| j.event_id == e).unwrap();
    let (a, b, c) = (
        by_event(events[0]),
        by_event(events[1]),
        by_event(events[2]),
    );
    let retry_at = now + chrono::Duration::minutes(5);
    let outcome = |job: &hookgate::store::ClaimedJob, token, update, outcome| JobOutcome {
        job: job.job_id,
        claim_token: token,
        update,
        record: AttemptRecord {
            attempt: job.attempt,
            worker_id: "test".into(),
            started_at: now,
            duration_ms: 1,
            status_code: Some(200),
            error: None,
            outcome,
        },
        now,
    };
    let applied = app
        .store
        .finish_jobs(&[
            outcome(
                a,
                a.claim_token,
                JobUpdate::Succeeded,
                AttemptOutcome::Succeeded,
            ),
            outcome(
                b,
                uuid::Uuid::now_v7(),
                JobUpdate::Succeeded,
                AttemptOutcome::Succeeded,
            ),
            outcome(
                c,
                c.claim_token,
                JobUpdate::Retry {
                    next_attempt_at: retry_at,
                },
                AttemptOutcome::Retry,
            ),
        ])
        .await
        .unwrap();
    assert_eq!(applied, [true, false, true]);
    let (ja, jb, jc) = (
        app.job(events[0], "billing").await,
        app.job(events[1], "billing").await,
        app.job(events[2], "billing").await,
    );
    assert_eq!(ja.status, JobStatus::Succeeded);
    assert_eq!(
        jb.status,
        JobStatus::InProgress,
        "a stale token changes nothing"
    );
    assert_eq!(jc.status, JobStatus::Pending);
    assert_eq!(
        jc.next_attempt_at.timestamp_millis(),
        retry_at.timestamp_millis()
    );
    assert_eq!(outcomes(&app, ja.id).await, ["succeeded"]);
    assert_eq!(outcomes(&app, jb.id).await, ["lease_lost"]);
    assert_eq!(outcomes(&app, jc.id).await, ["retry"]);
}

async fn graceful_shutdown_hands_unfinished_jobs_back(backend: Backend) {
    let sink = Sink::start().await;
    sink.script(
        "/billing",
        &[crate::support::sink::Answer {
            status: 200,
            retry_after: None,
            delay: Some(std::time::Duration::from_secs(30)),
        }],
    );
    let app = spawn_app_with_sink(backend, &sink, |s| {
        s.sources.retain(|src| src.name == "svix");
        s.worker.shutdown_grace = "200ms".into();
    })
    .await;
    let event = app.ingest_svix("msg_shutdown").await;
    let worker = app.start_worker();
    sink.wait_for("/billing", 1, std::time::Duration::from_secs(10))
        .await;
    worker.stop().await;

    let job = app.job(event, "billing").await;
    assert_eq!(
        job.status,
        JobStatus::Pending,
        "handed back, not left leased"
    );
    assert!(job.next_attempt_at <= Utc::now(), "due at once");
    let outcomes = outcomes(&app, job.id).await;
    assert_eq!(outcomes, ["released"]);
    // Another worker picks it up straight away, without waiting for a lease to expire.
    assert_eq!(app.worker().run_once().await.unwrap(), 1);
    assert_eq!(app.job(event, "billing").await.status, JobStatus::Succeeded);
}
