//! The claim rule of per-key ordered delivery, against a model: random sequences of
//! ingests, claims, outcomes, lease expiries, dead-letter retries and discards, and
//! replays, on both stores. After every claim the store must have claimed exactly the jobs
//! the model says are due at the head of their key's line.

use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

use chrono::{DateTime, Duration, Utc};
use hookgate::domain::{EventId, JobId, Name, ProviderEventId};
use hookgate::queue::{JobQueue, RetryPolicy};
use hookgate::routing::JobOrdering;
use hookgate::store::{
    AttemptOutcome, AttemptRecord, InsertOutcome, JobOutcome, JobUpdate, NewEvent, NewJob, Store,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use uuid::Uuid;

use crate::both_backends;
use crate::support::{new_event, spawn_app, Backend};

both_backends!(
    the_store_claims_exactly_the_heads_the_model_allows,
    two_claims_never_take_two_jobs_of_one_key,
);

#[derive(Debug, Clone)]
enum Op {
    /// A new event whose job has this key (none: unordered) and dead-letter choice.
    Ingest(Option<u8>, bool),
    Claim,
    Succeed(usize),
    RetryLater(usize),
    RetryNow(usize),
    Fail(usize),
    /// Every lease of the case's destination runs out and the reconciler returns the jobs.
    ExpireAll,
    RetryDeadLetter(usize),
    DiscardDeadLetter(usize),
    Replay(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let key = prop_oneof![1 => Just(None), 4 => (0u8..3).prop_map(Some)];
    prop_oneof![
        5 => (key, any::<bool>()).prop_map(|(k, h)| Op::Ingest(k, h)),
        5 => Just(Op::Claim),
        3 => any::<usize>().prop_map(Op::Succeed),
        2 => any::<usize>().prop_map(Op::RetryLater),
        1 => any::<usize>().prop_map(Op::RetryNow),
        2 => any::<usize>().prop_map(Op::Fail),
        1 => Just(Op::ExpireAll),
        1 => any::<usize>().prop_map(Op::RetryDeadLetter),
        1 => any::<usize>().prop_map(Op::DiscardDeadLetter),
        1 => any::<usize>().prop_map(Op::Replay),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Pending { due: bool },
    InProgress,
    Succeeded,
    Failed { discarded: bool },
}

/// A job as the model sees it; the model's jobs are in ingest order.
#[derive(Debug, Clone)]
struct Job {
    id: JobId,
    event: EventId,
    ordering: Option<JobOrdering>,
    state: State,
    token: Option<Uuid>,
    attempts: i32,
}

impl Job {
    fn blocks(&self) -> bool {
        match self.state {
            State::Pending { .. } | State::InProgress => true,
            State::Failed { discarded } => {
                self.ordering.as_ref().is_some_and(|o| o.hold) && !discarded
            }
            State::Succeeded => false,
        }
    }
}

/// The rule: a due pending job is claimable when it has no key, or no job of its key
/// ahead of it blocks.
fn claimable(jobs: &[Job]) -> Vec<JobId> {
    jobs.iter()
        .enumerate()
        .filter(|(_, j)| j.state == State::Pending { due: true })
        .filter(|(i, j)| match &j.ordering {
            None => true,
            Some(o) => !jobs[..*i]
                .iter()
                .any(|a| a.ordering.as_ref().is_some_and(|k| k.key == o.key) && a.blocks()),
        })
        .map(|(_, j)| j.id)
        .collect()
}

struct Case<'a> {
    store: &'a Store,
    destination: Name,
    now: DateTime<Utc>,
    jobs: Vec<Job>,
    events: usize,
}

fn record(attempt: i32, outcome: AttemptOutcome) -> AttemptRecord {
    AttemptRecord {
        attempt,
        worker_id: "model".into(),
        started_at: Utc::now(),
        duration_ms: 1,
        status_code: None,
        error: None,
        outcome,
    }
}

fn nth(jobs: &mut [Job], i: usize, pick: impl Fn(&Job) -> bool) -> Option<&mut Job> {
    let n = jobs.iter().filter(|j| pick(j)).count();
    if n == 0 {
        return None;
    }
    jobs.iter_mut().filter(|j| pick(j)).nth(i % n)
}

impl Case<'_> {
    async fn ingest(&mut self, ordering: Option<JobOrdering>) {
        let (tenant, source) = (
            Name::parse("tenant", "acme").unwrap(),
            Name::parse("source", "stripe").unwrap(),
        );
        self.events += 1;
        let pid = ProviderEventId::parse(&format!("{}-{}", self.destination, self.events)).unwrap();
        let destinations = [self.destination.clone()];
        let orderings = [ordering.clone()];
        let outcome = self
            .store
            .insert_event(&NewEvent {
                received_at: self.now,
                destinations: &destinations,
                orderings: &orderings,
                ..new_event(&tenant, &source, &pid, b"{}")
            })
            .await
            .unwrap();
        let InsertOutcome::Created(event) = outcome else {
            panic!("{outcome:?}")
        };
        let id = self.store.jobs_for_event(event).await.unwrap()[0].id;
        self.push(id, event, ordering);
    }

    fn push(&mut self, id: JobId, event: EventId, ordering: Option<JobOrdering>) {
        self.jobs.push(Job {
            id,
            event,
            ordering,
            state: State::Pending { due: true },
            token: None,
            attempts: 0,
        });
    }

    async fn finish(&mut self, i: usize, update: JobUpdate, state: State) {
        let Some(job) = nth(&mut self.jobs, i, |j| j.state == State::InProgress) else {
            return;
        };
        let outcome = JobOutcome {
            job: job.id,
            claim_token: job.token.take().unwrap(),
            update,
            record: record(job.attempts, AttemptOutcome::Retry),
            now: self.now,
        };
        job.state = state;
        let applied = self.store.finish_jobs(&[outcome]).await.unwrap();
        assert_eq!(applied, [true]);
    }

    async fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let later = self.now + Duration::hours(1);
        match op {
            Op::Ingest(key, hold) => {
                let ordering = key.map(|k| JobOrdering {
                    key: format!("key-{k}"),
                    hold: *hold,
                });
                self.ingest(ordering).await;
            }
            Op::Claim => {
                let expected = claimable(&self.jobs);
                let claimed = self
                    .store
                    .claim_jobs(self.destination.as_str(), 1000, self.now, later)
                    .await
                    .unwrap();
                let mut got: Vec<JobId> = claimed.iter().map(|c| c.job_id).collect();
                got.sort_by_key(|id| self.jobs.iter().position(|j| j.id == *id));
                prop_assert_eq!(&got, &expected, "jobs: {:?}", self.jobs);
                for c in claimed {
                    let job = self.jobs.iter_mut().find(|j| j.id == c.job_id).unwrap();
                    job.state = State::InProgress;
                    job.token = Some(c.claim_token);
                    job.attempts += 1;
                }
            }
            Op::Succeed(i) => {
                self.finish(*i, JobUpdate::Succeeded, State::Succeeded)
                    .await
            }
            Op::RetryLater(i) => {
                let update = JobUpdate::Retry {
                    next_attempt_at: later,
                };
                self.finish(*i, update, State::Pending { due: false }).await;
            }
            Op::RetryNow(i) => {
                let update = JobUpdate::Retry {
                    next_attempt_at: self.now,
                };
                self.finish(*i, update, State::Pending { due: true }).await;
            }
            Op::Fail(i) => {
                let failed = State::Failed { discarded: false };
                self.finish(*i, JobUpdate::Failed, failed).await;
            }
            Op::ExpireAll => {
                let queue = JobQueue::new(self.store.clone());
                let policy = RetryPolicy::new(vec![std::time::Duration::from_secs(1); 100]);
                let expired = queue
                    .expired(later + Duration::hours(1), 10_000)
                    .await
                    .unwrap();
                for lease in expired
                    .iter()
                    .filter(|l| l.destination == self.destination.as_str())
                {
                    assert!(queue.expire(lease, Some(&policy), self.now).await.unwrap());
                    let job = self.jobs.iter_mut().find(|j| j.id == lease.job_id).unwrap();
                    job.state = State::Pending { due: true };
                    job.token = None;
                }
            }
            Op::RetryDeadLetter(i) => {
                let dead = |j: &Job| j.state == State::Failed { discarded: false };
                if let Some(job) = nth(&mut self.jobs, *i, dead) {
                    let done = self.store.retry_dead_letter(job.id, "acme", self.now, None);
                    prop_assert!(done.await.unwrap());
                    job.state = State::Pending { due: true };
                    job.attempts = 0;
                }
            }
            Op::DiscardDeadLetter(i) => {
                let dead = |j: &Job| j.state == State::Failed { discarded: false };
                if let Some(job) = nth(&mut self.jobs, *i, dead) {
                    let done = self.store.discard_dead_letter(job.id, "acme", self.now);
                    prop_assert!(done.await.unwrap());
                    job.state = State::Failed { discarded: true };
                }
            }
            Op::Replay(i) => {
                if self.jobs.is_empty() {
                    return Ok(());
                }
                let original = self.jobs[i % self.jobs.len()].clone();
                let job = NewJob {
                    id: JobId::for_event(original.event),
                    event_id: original.event,
                    destination: self.destination.to_string(),
                    ordering: original.ordering.clone(),
                };
                self.store
                    .create_jobs(std::slice::from_ref(&job), self.now, None)
                    .await
                    .unwrap();
                self.push(job.id, job.event_id, job.ordering);
            }
        }
        Ok(())
    }
}

/// Destinations are per case, so the cases of one run share a database but not a queue.
static CASES: AtomicUsize = AtomicUsize::new(0);

async fn the_store_claims_exactly_the_heads_the_model_allows(backend: Backend) {
    let app = spawn_app(backend).await;
    let store = app.store.clone();
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let handle = tokio::runtime::Handle::current();
    let result = runner.run(&proptest::collection::vec(op(), 1..48), |ops| {
        tokio::task::block_in_place(|| {
            handle.block_on(async {
                let n = CASES.fetch_add(1, AtomicOrdering::Relaxed);
                let mut case = Case {
                    store: &store,
                    destination: Name::parse("destination", &format!("model-{n}")).unwrap(),
                    now: Utc::now(),
                    jobs: Vec::new(),
                    events: 0,
                };
                for op in &ops {
                    case.apply(op).await?;
                }
                case.apply(&Op::Claim).await
            })
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Claims of one destination running at once (on PostgreSQL, on separate connections)
/// never take two jobs of one key, however the keys are spread.
async fn two_claims_never_take_two_jobs_of_one_key(backend: Backend) {
    let app = spawn_app(backend).await;
    let store = app.store.clone();
    let mut case = Case {
        store: &store,
        destination: Name::parse("destination", "racing").unwrap(),
        now: Utc::now(),
        jobs: Vec::new(),
        events: 0,
    };
    for i in 0..200u32 {
        let ordering = JobOrdering {
            key: format!("key-{}", i % 20),
            hold: true,
        };
        case.ingest(Some(ordering)).await;
    }
    let later = case.now + Duration::hours(1);
    for _ in 0..10 {
        let claims = (0..4).map(|_| store.claim_jobs("racing", 7, case.now, later));
        let claimed: Vec<_> = futures_util::future::join_all(claims)
            .await
            .into_iter()
            .flat_map(Result::unwrap)
            .collect();
        let mut keys: Vec<&str> = claimed
            .iter()
            .map(|c| {
                let job = case.jobs.iter().find(|j| j.id == c.job_id).unwrap();
                job.ordering.as_ref().unwrap().key.as_str()
            })
            .collect();
        keys.sort_unstable();
        let all = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), all, "two jobs of one key in flight: {keys:?}");
        // Every key gets its head claimed: 20 keys, 28 slots.
        assert_eq!(all, 20);
        let outcomes: Vec<JobOutcome> = claimed
            .iter()
            .map(|c| JobOutcome {
                job: c.job_id,
                claim_token: c.claim_token,
                update: JobUpdate::Succeeded,
                record: record(c.attempt, AttemptOutcome::Succeeded),
                now: case.now,
            })
            .collect();
        assert!(store
            .finish_jobs(&outcomes)
            .await
            .unwrap()
            .iter()
            .all(|&a| a));
    }
}
