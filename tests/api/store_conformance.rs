//! The store's conformance suite: every public `Store` operation, run on both databases
//! (`both_backends!`), checking that each answers the same way on each.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use hookgate::domain::{EventId, JobId, Name, ProviderEventId};
use hookgate::queue::{JobQueue, JobStatus};
use hookgate::store::{
    ArrivalCursor, AttemptOutcome, AttemptRecord, BulkProgress, DeadLetterFilter, EventFilter,
    EventStatus, IdempotencyBegin, InsertOutcome, JobOutcome, JobUpdate, MissingJob, NewEvent,
    NewJob, ProgressKey, SavedResponse, Store,
};
use uuid::Uuid;

use crate::both_backends;
use crate::support::{new_event, spawn_app, Backend};

both_backends!(
    events_and_jobs_round_trip,
    the_queue_claims_renews_finishes_hands_back_and_expires,
    admin_lists_replays_retries_and_discards,
    idempotency_records_begin_save_release_and_sweep,
    retention_and_missing_jobs,
    console_sessions_round_trip,
    a_store_connects_migrates_and_closes,
);

fn name(kind: &'static str, s: &str) -> Name {
    Name::parse(kind, s).unwrap()
}

/// Stores one `acme`/`stripe` event with a job for each of `destinations`, received at `at`.
async fn store_event(store: &Store, id: &str, destinations: &[&str], at: DateTime<Utc>) -> EventId {
    let (tenant, source) = (name("tenant", "acme"), name("source", "stripe"));
    let destinations: Vec<Name> = destinations.iter().map(|d| name("d", d)).collect();
    let provider_id = ProviderEventId::parse(id).unwrap();
    let outcome = store
        .insert_event(&NewEvent {
            received_at: at,
            destinations: &destinations,
            ..new_event(&tenant, &source, &provider_id, b"{}")
        })
        .await
        .unwrap();
    match outcome {
        InsertOutcome::Created(id) => id,
        InsertOutcome::Duplicate(_) => panic!("{id} was stored before"),
    }
}

fn record(attempt: i32, outcome: AttemptOutcome) -> AttemptRecord {
    AttemptRecord {
        attempt,
        worker_id: "conformance".into(),
        started_at: Utc::now(),
        duration_ms: 3,
        status_code: Some(500),
        error: Some("boom".into()),
        outcome,
    }
}

/// Times as both stores keep them: to the millisecond.
fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

async fn events_and_jobs_round_trip(backend: Backend) {
    let app = spawn_app(backend).await;
    let store = &app.store;
    assert_eq!(store.backend_name(), format!("{backend:?}").to_lowercase());
    assert!(store.write_parallelism(4) >= 1);
    store.ping().await.unwrap();
    let (open, _idle, max) = store.pool_usage();
    assert!(open <= max && max > 0);

    let (tenant, source) = (name("tenant", "acme"), name("source", "stripe"));
    let destinations = [name("d", "billing"), name("d", "audit")];
    let (first, second) = (
        ProviderEventId::parse("evt_a").unwrap(),
        ProviderEventId::parse("evt_b").unwrap(),
    );
    let at = Utc::now();
    let event = |id| NewEvent {
        event_type: Some("charge.succeeded"),
        content_type: Some("application/json"),
        headers_json: r#"[["x-a","1"],["x-b","2"]]"#.into(),
        received_at: at,
        destinations: &destinations,
        ..new_event(&tenant, &source, id, b"{\"n\":1}")
    };
    let batch = [event(&first), event(&second), event(&first)];
    let outcomes = store.insert_events(&batch).await.unwrap();
    let InsertOutcome::Created(a) = outcomes[0] else {
        panic!("{outcomes:?}")
    };
    assert!(matches!(outcomes[1], InsertOutcome::Created(_)));
    assert_eq!(
        outcomes[2],
        InsertOutcome::Duplicate(a),
        "a copy in the batch shares the row"
    );
    let again = store.insert_event(&event(&first)).await.unwrap();
    assert_eq!(again, InsertOutcome::Duplicate(a));

    let stored = store.get_event(a).await.unwrap().expect("stored");
    assert_eq!(stored.id, a);
    assert_eq!(
        (stored.tenant.as_str(), stored.source.as_str()),
        ("acme", "stripe")
    );
    assert_eq!(stored.provider_event_id, "evt_a");
    assert_eq!(stored.event_type.as_deref(), Some("charge.succeeded"));
    assert_eq!(stored.content_type.as_deref(), Some("application/json"));
    assert_eq!(ms(stored.received_at), ms(at));
    assert_eq!(
        stored.headers,
        vec![("x-a".into(), "1".into()), ("x-b".into(), "2".into())]
    );
    assert_eq!(stored.body, b"{\"n\":1}");
    assert_eq!(
        (
            stored.verified_scheme.as_str(),
            stored.verified_secret_index
        ),
        ("stripe", 0)
    );
    let found = store.find_event("stripe", "evt_a").await.unwrap().unwrap();
    assert_eq!(found.id, a);
    assert!(store
        .find_event("stripe", "evt_none")
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_event(EventId::generate())
        .await
        .unwrap()
        .is_none());

    let jobs = store.jobs_for_event(a).await.unwrap();
    let names: Vec<_> = jobs.iter().map(|j| j.destination.as_str()).collect();
    assert_eq!(names, ["audit", "billing"]);
    let job = store.get_job(jobs[0].id).await.unwrap().unwrap();
    assert_eq!(
        (job.event_id, job.status, job.attempts),
        (a, JobStatus::Pending, 0)
    );
    assert!(job.locked_until.is_none() && job.discarded_at.is_none());
    assert!(store
        .get_job(JobId::for_event(EventId::generate()))
        .await
        .unwrap()
        .is_none());
    assert!(store.attempts_for_job(job.id).await.unwrap().is_empty());

    assert_eq!(store.count_events().await.unwrap(), 2);
    assert_eq!(store.count_jobs(JobStatus::Pending).await.unwrap(), 4);
    assert_eq!(store.count_jobs(JobStatus::Failed).await.unwrap(), 0);
    let mut by_status = store.count_jobs_by_status().await.unwrap();
    by_status.sort();
    assert_eq!(
        by_status,
        [
            ("pending".into(), "audit".into(), 2),
            ("pending".into(), "billing".into(), 2)
        ]
    );
    let lag = store
        .delivery_lag(job.next_attempt_at + chrono::Duration::seconds(60))
        .await
        .unwrap();
    assert!(lag >= Duration::from_secs(59), "{lag:?}");
    assert_eq!(
        store
            .delivery_lag(at - chrono::Duration::hours(1))
            .await
            .unwrap(),
        Duration::ZERO
    );
}

async fn the_queue_claims_renews_finishes_hands_back_and_expires(backend: Backend) {
    let app = spawn_app(backend).await;
    let (store, queue) = (&app.store, JobQueue::new(app.store.clone()));
    let now = Utc::now();
    let event = store_event(store, "evt_q", &["billing"], now).await;
    let lease = chrono::Duration::seconds(30);

    let mut waker = queue.waker().await.unwrap();
    waker.wait(Duration::from_millis(10)).await;

    let claimed = store
        .claim_jobs("billing", 10, now, now + lease)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let job = &claimed[0];
    assert_eq!((job.event_id, job.attempt), (event, 1));
    assert_eq!(
        (job.source.as_str(), job.provider_event_id.as_str()),
        ("stripe", "evt_q")
    );
    assert_eq!(job.body, b"{}");
    assert!(store
        .claim_jobs("billing", 10, now, now + lease)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.count_jobs(JobStatus::InProgress).await.unwrap(), 1);

    let later = now + chrono::Duration::seconds(60);
    assert!(queue
        .renew(job.job_id, job.claim_token, later)
        .await
        .unwrap());
    assert!(!store
        .renew_lease(job.job_id, Uuid::from_u128(42), later)
        .await
        .unwrap());
    let renewed = store.get_job(job.job_id).await.unwrap().unwrap();
    assert_eq!(renewed.locked_until.map(ms), Some(ms(later)));
    // Many at once (a process's lease keeper): only pairs whose claim holds are renewed.
    let much_later = later + chrono::Duration::seconds(60);
    let stale = (job.job_id, Uuid::from_u128(42));
    let held = (job.job_id, job.claim_token);
    let renewed = store.renew_leases(&[stale, held], much_later).await;
    assert_eq!(renewed.unwrap(), [job.job_id]);
    assert!(store
        .renew_leases(&[stale], much_later)
        .await
        .unwrap()
        .is_empty());
    let renewed = store.get_job(job.job_id).await.unwrap().unwrap();
    assert_eq!(renewed.locked_until.map(ms), Some(ms(much_later)));

    // A retry: applied under the claim's token, lost under another.
    let retry = |token| JobOutcome {
        job: job.job_id,
        claim_token: token,
        update: JobUpdate::Retry {
            next_attempt_at: now,
        },
        record: record(1, AttemptOutcome::Retry),
        now,
    };
    assert_eq!(
        queue.finish(&[retry(Uuid::from_u128(42))]).await.unwrap(),
        [false]
    );
    assert_eq!(
        queue.finish(&[retry(job.claim_token)]).await.unwrap(),
        [true]
    );
    let attempts = store.attempts_for_job(job.job_id).await.unwrap();
    let outcomes: Vec<_> = attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["lease_lost", "retry"]);
    assert_eq!(
        (attempts[1].status_code, attempts[1].duration_ms),
        (Some(500), 3)
    );
    assert_eq!(attempts[1].error.as_deref(), Some("boom"));
    assert_eq!(attempts[1].worker_id, "conformance");

    // Handed back by a stopping worker: due again, its attempt recorded as released.
    let claimed = queue.claim("billing", 1, now, now + lease).await.unwrap();
    assert_eq!(claimed[0].attempt, 2);
    assert!(queue
        .hand_back(
            claimed[0].job_id,
            claimed[0].claim_token,
            2,
            "conformance",
            now
        )
        .await
        .unwrap());
    let job_now = store.get_job(job.job_id).await.unwrap().unwrap();
    assert_eq!(job_now.status, JobStatus::Pending);

    // A lease that runs out is found, and expired by the reconciler's rules.
    let claimed = queue.claim("billing", 1, now, now + lease).await.unwrap();
    let past_lease = now + chrono::Duration::seconds(31);
    assert!(store.expired_leases(now, 10).await.unwrap().is_empty());
    let expired = queue.expired(past_lease, 10).await.unwrap();
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].job_id, claimed[0].job_id);
    assert_eq!(expired[0].claim_token, claimed[0].claim_token);
    assert_eq!(
        (expired[0].attempts, expired[0].destination.as_str()),
        (3, "billing")
    );
    assert!(queue.expire(&expired[0], None, past_lease).await.unwrap());
    let failed = store.get_job(job.job_id).await.unwrap().unwrap();
    assert_eq!(failed.status, JobStatus::Failed);
    assert!(!queue.expire(&expired[0], None, past_lease).await.unwrap());

    // A finished job through the one-job form.
    let other = store_event(store, "evt_q2", &["billing"], now).await;
    let claimed = store
        .claim_jobs("billing", 1, now, now + lease)
        .await
        .unwrap();
    assert_eq!(claimed[0].event_id, other);
    assert!(store
        .finish_job(
            claimed[0].job_id,
            claimed[0].claim_token,
            JobUpdate::Succeeded,
            &record(1, AttemptOutcome::Succeeded),
            now
        )
        .await
        .unwrap());
    assert_eq!(store.count_jobs(JobStatus::Succeeded).await.unwrap(), 1);

    let lock = store.try_reconcile_lock().await.unwrap().expect("free");
    lock.release().await;
    store
        .try_reconcile_lock()
        .await
        .unwrap()
        .expect("free again")
        .release()
        .await;
}

async fn admin_lists_replays_retries_and_discards(backend: Backend) {
    let app = spawn_app(backend).await;
    let store = &app.store;
    let now = Utc::now();
    let older = store_event(store, "evt_old", &[], now - chrono::Duration::seconds(5)).await;
    let newer = store_event(store, "evt_new", &["billing"], now).await;
    let filter = EventFilter {
        tenant: "acme".into(),
        source: None,
        event_type: None,
        provider_event_id: None,
        status: None,
        received_from: None,
        received_to: None,
    };
    let listed = store.list_events(&filter, None, 10).await.unwrap();
    assert_eq!(
        listed.iter().map(|e| e.id).collect::<Vec<_>>(),
        [newer, older]
    );
    assert_eq!(
        ms(listed[1].received_at),
        ms(now - chrono::Duration::seconds(5))
    );
    let cursor = hookgate::store::PageCursor {
        at: listed[0].received_at,
        id: listed[0].id.as_uuid(),
    };
    let rest = store.list_events(&filter, Some(cursor), 10).await.unwrap();
    assert_eq!(rest.iter().map(|e| e.id).collect::<Vec<_>>(), [older]);
    assert_eq!(store.count_matching_events(&filter).await.unwrap(), 2);
    let pending = EventFilter {
        status: Some(EventStatus::Job(JobStatus::Pending)),
        ..filter.clone()
    };
    assert_eq!(store.count_matching_events(&pending).await.unwrap(), 1);

    // New jobs, with the idempotent answer saved alongside.
    store
        .idempotency_begin("acme", "k-jobs", "h", now, now)
        .await
        .unwrap();
    let job = NewJob {
        id: JobId::for_event(older),
        event_id: older,
        destination: "audit".into(),
        ordering: None,
    };
    let save = SavedResponse {
        tenant: "acme",
        key: "k-jobs",
        status: 202,
        body: b"ok",
    };
    store
        .create_jobs(std::slice::from_ref(&job), now, Some(&save))
        .await
        .unwrap();
    let found = store
        .find_job(job.id, "acme")
        .await
        .unwrap()
        .expect("own tenant");
    assert_eq!(
        (found.job.destination.as_str(), found.event.id),
        ("audit", older)
    );
    assert!(store.find_job(job.id, "default").await.unwrap().is_none());
    let answer = store
        .idempotency_begin("acme", "k-jobs", "h", now, now)
        .await
        .unwrap();
    assert_eq!(
        answer,
        IdempotencyBegin::Completed {
            status: 202,
            body: b"ok".to_vec()
        }
    );

    // Replay: a job per routed destination of each event in the batch, with progress.
    store
        .idempotency_begin("acme", "k-replay", "h", now, now)
        .await
        .unwrap();
    let routes = BTreeMap::from([("stripe".to_owned(), vec!["billing".to_owned()])]);
    let progress = store
        .replay_events_batch(
            &filter,
            BulkProgress::default(),
            1,
            &routes,
            now,
            Some(ProgressKey {
                tenant: "acme",
                key: "k-replay",
            }),
        )
        .await
        .unwrap();
    assert_eq!(progress.done, 1);
    assert_eq!(progress.after.map(|p| p.id), Some(newer.as_uuid()));
    assert_eq!(store.jobs_for_event(newer).await.unwrap().len(), 2);
    let progress = store
        .replay_events_batch(&filter, progress, 10, &routes, now, None)
        .await
        .unwrap();
    assert_eq!(progress.done, 2);

    // Dead letters: fail every billing job, then list, retry and discard them.
    let lease = now + chrono::Duration::seconds(30);
    for claimed in store.claim_jobs("billing", 10, now, lease).await.unwrap() {
        let failed = JobOutcome {
            job: claimed.job_id,
            claim_token: claimed.claim_token,
            update: JobUpdate::Failed,
            record: record(1, AttemptOutcome::Failed),
            now,
        };
        assert_eq!(store.finish_jobs(&[failed]).await.unwrap(), [true]);
    }
    let dead = DeadLetterFilter {
        tenant: "acme".into(),
        destination: Some("billing".into()),
        source: None,
        failed_before: None,
    };
    let letters = store.list_dead_letters(&dead, None, 10).await.unwrap();
    assert_eq!(letters.len(), 3);
    assert!(letters.iter().all(|l| l.job.status == JobStatus::Failed));
    let one = letters[0].job.id;
    assert!(store
        .retry_dead_letter(one, "acme", now, None)
        .await
        .unwrap());
    assert!(!store
        .retry_dead_letter(one, "acme", now, None)
        .await
        .unwrap());
    assert!(store
        .discard_dead_letter(letters[1].job.id, "acme", now)
        .await
        .unwrap());
    assert!(!store
        .discard_dead_letter(letters[1].job.id, "acme", now)
        .await
        .unwrap());
    assert_eq!(
        store
            .list_dead_letters(&dead, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    let retried = store
        .retry_dead_letters_batch(&dead, BulkProgress::default(), 10, now, None)
        .await
        .unwrap();
    assert_eq!(retried.done, 1);
    for claimed in store.claim_jobs("billing", 10, now, lease).await.unwrap() {
        let failed = JobOutcome {
            job: claimed.job_id,
            claim_token: claimed.claim_token,
            update: JobUpdate::Failed,
            record: record(2, AttemptOutcome::Failed),
            now,
        };
        store.finish_jobs(&[failed]).await.unwrap();
    }
    assert_eq!(
        store
            .discard_dead_letters_batch(&dead, now, 10)
            .await
            .unwrap(),
        2
    );
    assert!(store
        .list_dead_letters(&dead, None, 10)
        .await
        .unwrap()
        .is_empty());
}

async fn idempotency_records_begin_save_release_and_sweep(backend: Backend) {
    let app = spawn_app(backend).await;
    let store = &app.store;
    let now = Utc::now();
    let long_ago = now - chrono::Duration::hours(1);
    let begin = |key, hash| store.idempotency_begin("acme", key, hash, now, long_ago);
    assert_eq!(
        begin("k", "h").await.unwrap(),
        IdempotencyBegin::Proceed { progress: None }
    );
    assert_eq!(
        begin("k", "h").await.unwrap(),
        IdempotencyBegin::InProgress { done: None }
    );
    assert_eq!(
        begin("k", "other").await.unwrap(),
        IdempotencyBegin::Mismatch
    );
    // Abandoned: older than the stale limit, so the next request takes it over.
    let stale = store
        .idempotency_begin("acme", "k", "h", now, now + chrono::Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(stale, IdempotencyBegin::Proceed { progress: None });
    let save = SavedResponse {
        tenant: "acme",
        key: "k",
        status: 409,
        body: b"no",
    };
    store.idempotency_save(&save, now).await.unwrap();
    assert_eq!(
        begin("k", "h").await.unwrap(),
        IdempotencyBegin::Completed {
            status: 409,
            body: b"no".to_vec()
        }
    );
    assert_eq!(
        begin("r", "h").await.unwrap(),
        IdempotencyBegin::Proceed { progress: None }
    );
    store.idempotency_release("acme", "r").await.unwrap();
    assert_eq!(
        begin("r", "h").await.unwrap(),
        IdempotencyBegin::Proceed { progress: None }
    );
    let later = now + chrono::Duration::seconds(1);
    assert_eq!(store.sweep_idempotency(later, 1).await.unwrap(), 1);
    assert_eq!(store.sweep_idempotency(later, 10).await.unwrap(), 1);
    assert_eq!(store.sweep_idempotency(later, 10).await.unwrap(), 0);
}

async fn retention_and_missing_jobs(backend: Backend) {
    let app = spawn_app(backend).await;
    let store = &app.store;
    let now = Utc::now();
    let old = now - chrono::Duration::days(2);
    let a = store_event(store, "evt_r1", &[], old).await;
    let b = store_event(store, "evt_r2", &[], old + chrono::Duration::seconds(1)).await;
    let c = store_event(store, "evt_r3", &["billing"], now).await;

    // The repair reads `limit` events a step, whole only when another configuration routed
    // them (their digest is not the current one: none, here), creates what they lack and
    // records the current digest, so the next scan passes over them.
    let digest = 7;
    let start = ArrivalCursor::starting_at(old - chrono::Duration::seconds(1));
    let step = store
        .reroute_scan("stripe", digest, start, 2)
        .await
        .unwrap();
    let stale: Vec<_> = step.stale.iter().map(|e| e.id).collect();
    assert_eq!(stale, [a, b]);
    assert_eq!(step.stale[0].body, b"{}", "a stale event is read whole");
    let next = step.next.expect("more to read");
    assert_eq!(next.event, b);
    let jobs: Vec<MissingJob> = [a, b, c]
        .into_iter()
        .map(|event| MissingJob {
            event,
            destination: "billing".into(),
            due: now,
            ordering: None,
        })
        .collect();
    let created = store.create_missing_jobs(&stale, digest, &jobs, now).await;
    assert_eq!(created.unwrap(), 2, "evt_r3 had its job");
    let again = store.create_missing_jobs(&stale, digest, &jobs, now).await;
    assert_eq!(again.unwrap(), 0, "a job is created once");
    let rescan = store
        .reroute_scan("stripe", digest, start, 10)
        .await
        .unwrap();
    let stale: Vec<_> = rescan.stale.iter().map(|e| e.id).collect();
    assert_eq!(stale, [c], "a and b now carry the current digest");
    assert_eq!(rescan.next, None);
    assert_eq!(store.jobs_for_event(a).await.unwrap().len(), 1);

    // Pending jobs keep their events; settled ones go.
    let cutoff = now - chrono::Duration::days(1);
    assert_eq!(
        store.purge_expired_events(cutoff, now, 10).await.unwrap(),
        0
    );
    let lease = now + chrono::Duration::seconds(30);
    for claimed in store.claim_jobs("billing", 10, now, lease).await.unwrap() {
        store
            .finish_job(
                claimed.job_id,
                claimed.claim_token,
                JobUpdate::Succeeded,
                &record(1, AttemptOutcome::Succeeded),
                now,
            )
            .await
            .unwrap();
    }
    assert_eq!(store.purge_expired_events(cutoff, now, 1).await.unwrap(), 1);
    let purged = store.get_event(a).await.unwrap().unwrap();
    assert!(purged.body.is_empty() && purged.headers.is_empty());
    assert!(store.jobs_for_event(a).await.unwrap().is_empty());
    assert_eq!(store.delete_expired_events(cutoff, 10).await.unwrap(), 2);
    assert!(store.get_event(b).await.unwrap().is_none());
    assert!(store.get_event(c).await.unwrap().is_some());
    assert_eq!(store.count_events().await.unwrap(), 1);
}

async fn console_sessions_round_trip(backend: Backend) {
    let app = spawn_app(backend).await;
    let store = &app.store;
    let (id, other) = ([7u8; 32], [8u8; 32]);
    store.create_session(&id, "acme", 100, 1_000).await.unwrap();
    store
        .create_session(&other, "default", 100, 150)
        .await
        .unwrap();
    let session = store.find_session(&id).await.unwrap().unwrap();
    assert_eq!(
        (
            session.tenant.as_str(),
            session.created_at,
            session.seen_at,
            session.expires_at
        ),
        ("acme", 100, 100, 1_000)
    );
    store.touch_session(&id, 200).await.unwrap();
    assert_eq!(store.find_session(&id).await.unwrap().unwrap().seen_at, 200);
    assert_eq!(
        store.sweep_sessions(160, 150, 10).await.unwrap(),
        1,
        "past its expiry"
    );
    assert!(store.find_session(&other).await.unwrap().is_none());
    assert!(store.delete_session(&id).await.unwrap());
    assert!(!store.delete_session(&id).await.unwrap());
    assert!(store.find_session(&id).await.unwrap().is_none());
}

async fn a_store_connects_migrates_and_closes(backend: Backend) {
    let app = spawn_app(backend).await;
    let store = Store::connect(&app.config.database).unwrap();
    store.migrate().await.unwrap();
    store
        .migrate()
        .await
        .expect("migrating twice changes nothing");
    store.spawn_maintenance();
    store.ping().await.unwrap();
    assert_eq!(store.count_events().await.unwrap(), 0);
    store.close().await;
    assert!(store.ping().await.is_err(), "closed");
    app.store
        .ping()
        .await
        .expect("another store on the database is unaffected");
}
