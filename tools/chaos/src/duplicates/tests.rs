//! The attribution's unit tests.

use super::*;
use bytes::Bytes;

const LEASE: f64 = 5.0;
const TIMEOUT: f64 = 2.0;

fn copy(path: &str, id: &str, attempt: u32, at_secs: f64) -> Delivery {
    Delivery {
        path: path.into(),
        webhook_id: Some(id.into()),
        provider_event_id: Some(format!("evt_{id}")),
        attempt: Some(attempt),
        answered: Answered::Ok,
        signature_ok: true,
        body: Bytes::new(),
        at_secs,
    }
}

fn row(attempt: i64, worker_id: &str, outcome: &str) -> AttemptRow {
    AttemptRow {
        attempt,
        worker_id: worker_id.into(),
        outcome: outcome.into(),
    }
}

fn fault(kind: &str, slot: Option<&str>, at_secs: f64, ends_secs: Option<f64>) -> FaultEvent {
    FaultEvent {
        at_secs,
        kind: kind.into(),
        detail: String::new(),
        slot: slot.map(str::to_owned),
        ends_secs,
    }
}

fn slots() -> Vec<(String, Kind)> {
    [
        ("pg-api-1", Kind::Api),
        ("pg-worker-1", Kind::Worker),
        ("pg-worker-2", Kind::Worker),
        ("sqlite-all", Kind::AllInOne),
    ]
    .map(|(n, k)| (n.to_owned(), k))
    .to_vec()
}

/// Event `e` to the PostgreSQL sink: attempt 1 accepted at +10 s and never recorded (the
/// reconciler expired it), attempt 2 accepted at +16 s and recorded.
fn expired_once(path: &str) -> (Vec<Delivery>, Attempts) {
    let deliveries = vec![copy(path, "e", 1, 10.0), copy(path, "e", 2, 16.0)];
    let dest = if path.ends_with("/ordered") {
        "ordered"
    } else {
        "sink"
    };
    let mut attempts = Attempts::new();
    attempts.insert(
        ("e".into(), dest.into()),
        vec![
            row(1, "reconciler", "lease_expired"),
            row(2, "vm-4242-0a1b2c", "succeeded"),
        ],
    );
    (deliveries, attempts)
}

fn run(deliveries: &[Delivery], attempts: &Attempts, faults: &[FaultEvent]) -> DuplicateFindings {
    let slots_by_pid = HashMap::from([
        (4242, "pg-worker-2".to_owned()),
        (77, "pg-worker-1".to_owned()),
    ]);
    attribute(
        deliveries,
        &Context {
            attempts,
            faults,
            slots_by_pid: &slots_by_pid,
            slots: &slots(),
            lease_secs: LEASE,
            timeout_secs: TIMEOUT,
        },
    )
}

#[test]
fn a_kill_of_a_worker_after_the_first_copy_explains_the_second() {
    let (deliveries, attempts) = expired_once("/postgres");
    let kill = fault("kill -9 worker (pg)", Some("pg-worker-1"), 10.3, None);
    let f = run(&deliveries, &attempts, &[kill]);
    assert_eq!((f.deliveries, f.extra), (1, 1));
    assert_eq!(f.after_process_fault.get("kill -9 pg-worker-1"), Some(&1));
    assert!(
        f.unexplained.is_empty() && f.violations().is_empty(),
        "{f:?}"
    );
}

#[test]
fn without_a_fault_in_the_lease_window_the_duplicate_is_a_violation() {
    let (deliveries, attempts) = expired_once("/postgres");
    for faults in [
        vec![],
        // Too late: the worker would have recorded the outcome long before.
        vec![fault(
            "kill -9 worker (pg)",
            Some("pg-worker-1"),
            16.0,
            None,
        )],
        // Before the copy was sent: the killed process did not send it.
        vec![fault("kill -9 worker (pg)", Some("pg-worker-1"), 8.0, None)],
        // A process that holds no leases.
        vec![fault("kill -9 api (pg)", Some("pg-api-1"), 10.3, None)],
        // A fault of the other store.
        vec![fault(
            "kill -9 all-in-one (sqlite)",
            Some("sqlite-all"),
            10.3,
            None,
        )],
    ] {
        let f = run(&deliveries, &attempts, &faults);
        assert_eq!(f.unexplained.len(), 1, "{faults:?}");
        assert_eq!(f.violations().len(), 1);
        assert_eq!(f.explained_by_process() + f.explained_by_database(), 0);
    }
}

#[test]
fn a_duplicate_whose_lease_never_expired_is_unexplained_whatever_the_faults() {
    let (deliveries, mut attempts) = expired_once("/postgres");
    attempts.insert(
        ("e".into(), "sink".into()),
        vec![
            row(1, "vm-77-aa", "retry"),
            row(2, "vm-4242-bb", "succeeded"),
        ],
    );
    let kill = fault("kill -9 worker (pg)", Some("pg-worker-1"), 10.3, None);
    let f = run(&deliveries, &attempts, &[kill]);
    assert_eq!(f.unexplained.len(), 1);
    assert!(
        f.unexplained[0].contains("never expired (recorded: retry)"),
        "{f:?}"
    );

    // The same attempt accepted twice.
    let twice = vec![
        copy("/postgres", "e", 2, 10.0),
        copy("/postgres", "e", 2, 10.2),
    ];
    let f = run(&twice, &attempts, &[]);
    assert!(f.unexplained[0].contains("accepted twice"), "{f:?}");

    // Unless PostgreSQL crashed then: the claim (committed without waiting for its flush)
    // was lost, and the job claimed again under the same attempt number. A cut connection
    // loses no commit, and SQLite's claims are durable.
    let crash = fault("postgres restart", None, 10.1, Some(10.7));
    let f = run(&twice, &attempts, std::slice::from_ref(&crash));
    assert_eq!(f.explained_by_database(), 1, "{f:?}");
    let cut = fault("pg_terminate_backend", None, 10.1, None);
    assert_eq!(run(&twice, &attempts, &[cut]).unexplained.len(), 1);
    let lite_twice = vec![copy("/sqlite", "e", 2, 10.0), copy("/sqlite", "e", 2, 10.2)];
    let mut lite = Attempts::new();
    lite.insert(
        ("e".into(), "sink".into()),
        attempts[&("e".into(), "sink".into())].clone(),
    );
    assert_eq!(run(&lite_twice, &lite, &[crash]).unexplained.len(), 1);
}

#[test]
fn a_late_report_names_the_paused_process_and_a_stale_copy_counts_too() {
    // pg-worker-2 (pid 4242) claimed attempt 1 and was paused from +9 s to +17 s: its
    // lease expired, pg-worker-1 delivered attempt 2 at +15 s, and pg-worker-2 sent its
    // stale attempt 1 on resuming, at +17.1 s, then reported it (lease_lost).
    let deliveries = vec![
        copy("/postgres", "e", 2, 15.0),
        copy("/postgres", "e", 1, 17.1),
    ];
    let mut attempts = Attempts::new();
    attempts.insert(
        ("e".into(), "sink".into()),
        vec![
            row(1, "reconciler", "lease_expired"),
            row(2, "vm-77-cc", "succeeded"),
            row(1, "vm-4242-dd", "lease_lost"),
        ],
    );
    let pause = fault(
        "pause (SIGSTOP) worker (pg)",
        Some("pg-worker-2"),
        9.0,
        Some(17.0),
    );
    // A kill of the other worker fits the time, but the late report names pg-worker-2.
    let other = fault("kill -9 worker (pg)", Some("pg-worker-1"), 17.2, None);
    let f = run(&deliveries, &attempts, &[pause, other.clone()]);
    assert_eq!(
        f.after_process_fault.get("pause pg-worker-2"),
        Some(&1),
        "{f:?}"
    );
    assert!(f.unexplained.is_empty());
    let f = run(&deliveries, &attempts, &[other]);
    assert_eq!(f.unexplained.len(), 1, "{f:?}");
    assert!(f.unexplained[0].contains("pause of pg-worker-2"), "{f:?}");
}

#[test]
fn a_pause_that_outlasts_the_timeout_explains_a_retry_of_an_accepted_attempt() {
    // pg-worker-1 (pid 77) sent attempt 1, accepted at +10 s, and was paused at once for
    // 8 s: on resuming, the attempt's 2 s timeout had run out, so it recorded a retry, and
    // attempt 2 went out.
    let (deliveries, mut attempts) = expired_once("/postgres/ordered");
    attempts.insert(
        ("e".into(), "ordered".into()),
        vec![
            row(1, "vm-77-aa", "retry"),
            row(2, "vm-4242-bb", "succeeded"),
        ],
    );
    let pause = |slot, at, ends| fault("pause (SIGSTOP) worker (pg)", Some(slot), at, Some(ends));
    let f = run(&deliveries, &attempts, &[pause("pg-worker-1", 10.0, 18.0)]);
    assert_eq!(
        f.after_process_fault.get("pause pg-worker-1"),
        Some(&1),
        "{f:?}"
    );
    assert!(f.violations().is_empty(), "{f:?}");

    for faults in [
        // The other worker's pause: the one that recorded the retry read its answer.
        vec![pause("pg-worker-2", 10.0, 18.0)],
        // Paused before the request went out: the process did not send this copy.
        vec![pause("pg-worker-1", 8.0, 18.0)],
        // Resumed before the timeout ran out: it would have read the answer.
        vec![pause("pg-worker-1", 10.0, 11.0)],
        // A kill writes no retry.
        vec![fault(
            "kill -9 worker (pg)",
            Some("pg-worker-1"),
            10.0,
            Some(11.0),
        )],
    ] {
        let f = run(&deliveries, &attempts, &faults);
        assert_eq!(f.unexplained.len(), 1, "{faults:?}: {f:?}");
    }
}

#[test]
fn a_database_fault_explains_postgres_duplicates_only() {
    let restart = fault("postgres restart", None, 9.0, Some(11.0));
    let (deliveries, attempts) = expired_once("/postgres/ordered");
    let f = run(&deliveries, &attempts, std::slice::from_ref(&restart));
    assert_eq!(
        f.after_database_fault.get("postgres restart"),
        Some(&1),
        "{f:?}"
    );
    assert_eq!(f.violations().len(), 0);

    // A connection cut a while before the attempt is found dead when its outcome is
    // written; one cut long before is not this attempt's cause.
    let cut = |at| fault("pg_terminate_backend", None, at, None);
    let f = run(&deliveries, &attempts, &[cut(10.0 - 9.0)]);
    assert_eq!(f.explained_by_database(), 1, "{f:?}");
    let f = run(&deliveries, &attempts, &[cut(10.0 - 20.0)]);
    assert_eq!(f.unexplained.len(), 1, "{f:?}");

    let (deliveries, attempts) = expired_once("/sqlite");
    let f = run(&deliveries, &attempts, &[restart]);
    assert_eq!(f.unexplained.len(), 1, "{f:?}");
    let pause = fault(
        "pause (SIGSTOP) all-in-one (sqlite)",
        Some("sqlite-all"),
        12.0,
        Some(19.0),
    );
    let f = run(&deliveries, &attempts, &[pause]);
    assert_eq!(
        f.after_process_fault.get("pause sqlite-all"),
        Some(&1),
        "{f:?}"
    );
}

#[test]
fn single_deliveries_and_refused_copies_are_not_duplicates() {
    let (mut deliveries, attempts) = expired_once("/postgres");
    deliveries[0].answered = Answered::Fail500;
    let f = run(&deliveries, &attempts, &[]);
    assert_eq!((f.deliveries, f.extra), (0, 0));
    assert!(f.violations().is_empty());
}

#[test]
fn worker_ids_carry_the_pid() {
    assert_eq!(pid_of("my-host-name-4242-0a1b2c3d"), Some(4242));
    assert_eq!(pid_of("reconciler"), None);
}
