//! Delivery workers: claim due jobs with a lease, deliver them, record the outcome under the
//! claim token. Safe to run in many processes against one database.

mod crash;
mod deliver;
mod gate;
mod leases;
mod reconcile;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::alerts::Alerts;
use crate::config::GatewayConfig;
use crate::delivery::Deliverer;
use crate::domain::JobId;
use crate::queue::{lease_span, HandedOff, Handoff, JobQueue};
use crate::store::{ClaimedJob, GroupCommit, JobOutcome, Pacing, Store, StoreError};
use crate::telemetry::Metrics;
use gate::Gate;

pub use crash::{CrashPoint, CrashPoints};
pub use reconcile::{ReconcileReport, Reconciler};

/// One process's delivery workers.
pub struct Worker {
    id: String,
    queue: JobQueue,
    /// Raises `destination.tripped` and `destination.recovered`.
    alerts: Alerts,
    config: Arc<GatewayConfig>,
    deliverer: Deliverer,
    /// Caps deliveries in flight in this process.
    global: Arc<Semaphore>,
    /// Caps each destination, so one slow receiver cannot take every slot.
    per_destination: BTreeMap<String, Arc<Semaphore>>,
    /// Where this process's ingest passes the jobs it claimed as it made them.
    handoff: Handoff,
    /// How long a claim reserves a job (`worker.lease`).
    lease: chrono::Duration,
    /// Jobs claimed and not yet finished, to hand back on shutdown.
    in_flight: Arc<Mutex<HashMap<JobId, (Uuid, i32)>>>,
    finished: Arc<Notify>,
    /// An outcome of a destination with ordered jobs was written (`deliver::Context`).
    line_moved: Arc<Notify>,
    /// What every delivery task shares, including the writer through which outcomes of
    /// concurrent deliveries share transactions; built on first use, inside the runtime.
    deliveries: OnceLock<Arc<deliver::Context>>,
    crash: CrashPoints,
    metrics: Arc<Metrics>,
    /// Whether the loop is waiting for a wake-up now (tests wait on it, so that only a
    /// wake-up can deliver what comes next).
    waiting: watch::Sender<bool>,
    /// Lease renewal statements committed (tests wait on it instead of on the clock).
    lease_renewals: watch::Sender<u64>,
}

/// Outcomes written per transaction, at most.
const OUTCOME_BATCH_MAX: usize = 128;

/// One writer for outcomes, on either store. Slots are freed when the destination answers,
/// not when its outcome commits, so outcome latency does not hold deliveries back; what
/// counts is the database's work per outcome, and each outcome statement is planned afresh
/// on PostgreSQL (see `PgStore::relaxed`), so fewer, larger batches cost less. Measured
/// against two writers: a 100k drain 8,112 / 7,888 vs 6,691 / 6,259 deliveries/s
/// (see docs/decisions/).
const OUTCOME_WRITERS: usize = 1;

impl Worker {
    pub fn new(store: Store, config: Arc<GatewayConfig>) -> Self {
        let per_destination = config
            .destinations
            .iter()
            .map(|(name, d)| (name.clone(), Arc::new(Semaphore::new(d.max_in_flight))))
            .collect();
        let global = Arc::new(Semaphore::new(config.worker.concurrency));
        let lease = lease_span(config.worker.lease);
        let handoff = Handoff::new(global.clone(), &per_destination, lease);
        Self {
            id: format!(
                "{}-{}-{}",
                hostname(),
                std::process::id(),
                &crate::domain::time_ordered_uuid().simple().to_string()[24..]
            ),
            queue: JobQueue::new(store.clone()),
            alerts: Alerts::new(store, config.clone()),
            global,
            deliverer: Deliverer::new(&config.destinations),
            config,
            per_destination,
            handoff,
            lease,
            in_flight: Arc::default(),
            finished: Arc::default(),
            line_moved: Arc::default(),
            deliveries: OnceLock::new(),
            crash: CrashPoints::default(),
            metrics: Arc::default(),
            waiting: watch::Sender::new(false),
            lease_renewals: watch::Sender::new(0),
        }
    }

    /// Whether the loop is waiting for a wake-up now (see `run`).
    pub fn waiting(&self) -> watch::Receiver<bool> {
        self.waiting.subscribe()
    }

    /// How many lease renewal statements have committed, one per round over every
    /// delivery in flight (see `leases`).
    pub fn lease_renewals(&self) -> watch::Receiver<u64> {
        self.lease_renewals.subscribe()
    }

    /// Counts attempts into these metrics (by default, into a registry nobody scrapes).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn crash_points(&self) -> &CrashPoints {
        &self.crash
    }

    /// For this process's ingest (`IngestBatcher::hand_off_to`): new jobs it may claim for
    /// these workers as it creates them. Taken only while the worker runs (`run`, or between
    /// `run_once` calls).
    pub fn handoff(&self) -> Handoff {
        self.handoff.clone()
    }

    /// Takes the jobs handed off by ingest, claims every due job there is capacity for,
    /// delivers them, and waits until each has finished. Returns how many jobs it started.
    /// Tests drive delivery with this.
    pub async fn run_once(&self) -> Result<usize, StoreError> {
        self.run_once_at(Utc::now()).await
    }

    /// As `run_once`, taking `now` as the time jobs are due by (tests move the clock).
    pub async fn run_once_at(&self, now: DateTime<Utc>) -> Result<usize, StoreError> {
        let mut tasks = JoinSet::new();
        let started = self.spawn_handed_off(&mut tasks);
        let claims = self.claim_and_spawn(now, &mut tasks).await?;
        while tasks.join_next().await.is_some() {}
        Ok(started + claims.claimed)
    }

    /// Runs until `shutdown` turns true: then stops claiming, lets in-flight deliveries
    /// finish within the grace period, and hands the rest back to the queue.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut waker = loop {
            match self.queue.waker().await {
                Ok(w) => break w,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for new jobs; retrying");
                    if wait_or_shutdown(&mut shutdown, self.config.worker.poll_interval).await {
                        return;
                    }
                }
            }
        };
        let mut tasks = JoinSet::new();
        while !*shutdown.borrow() {
            while tasks.try_join_next().is_some() {}
            self.spawn_handed_off(&mut tasks);
            let claims = match self.claim_and_spawn(Utc::now(), &mut tasks).await {
                Ok(claims) => claims,
                Err(e) => {
                    tracing::warn!(error = %e, "claiming jobs failed");
                    Claims::default()
                }
            };
            match next_claim(
                claims.claimed,
                claims.backlog,
                self.config.worker.batch_window,
            ) {
                NextClaim::Now => {}
                NextClaim::After(window) => {
                    let wait = wait_or_shutdown(&mut shutdown, window);
                    if self.spawning_handed_off(&mut tasks, wait).await {
                        break;
                    }
                }
                NextClaim::OnWake => {
                    // A freed slot matters only to a destination that had none; waking for
                    // every finished delivery would be an empty claim per delivery.
                    let freed = async {
                        if claims.out_of_room {
                            self.finished.notified().await
                        } else {
                            std::future::pending().await
                        }
                    };
                    let token = async {
                        match claims.next_token {
                            Some(at) => {
                                let wait = (at - Utc::now()).to_std().unwrap_or_default();
                                tokio::time::sleep(wait).await
                            }
                            None => std::future::pending().await,
                        }
                    };
                    let wait = async {
                        // Set in the same poll that starts listening below.
                        self.waiting.send_replace(true);
                        tokio::select! {
                            _ = waker.wait(self.config.worker.poll_interval) => {}
                            _ = freed => {}
                            _ = self.line_moved.notified() => {}
                            _ = token => {}
                            _ = shutdown.changed() => {}
                        }
                        self.waiting.send_replace(false);
                    };
                    self.spawning_handed_off(&mut tasks, wait).await;
                }
            }
        }
        self.drain(tasks).await;
    }

    /// Starts delivering every job ingest handed off; returns how many.
    fn spawn_handed_off(&self, tasks: &mut JoinSet<()>) -> usize {
        let jobs = self.handoff.take();
        let n = jobs.len();
        for HandedOff { job, permits } in jobs {
            self.start(job, Permits::Held(permits), tasks);
        }
        n
    }

    /// Waits for `wake`, starting handed-off jobs as they arrive meanwhile.
    async fn spawning_handed_off<T>(
        &self,
        tasks: &mut JoinSet<()>,
        wake: impl std::future::Future<Output = T>,
    ) -> T {
        tokio::pin!(wake);
        loop {
            tokio::select! {
                out = &mut wake => return out,
                _ = self.handoff.arrived() => {
                    self.spawn_handed_off(tasks);
                }
            }
        }
    }

    fn start(&self, job: ClaimedJob, permits: Permits, tasks: &mut JoinSet<()>) {
        self.in_flight
            .lock()
            .expect("in-flight map")
            .insert(job.job_id, (job.claim_token, job.attempt));
        tasks.spawn(self.delivery_task(job, permits));
    }

    async fn drain(&self, mut tasks: JoinSet<()>) {
        self.handoff.open(false);
        self.spawn_handed_off(&mut tasks);
        let grace = self.config.worker.shutdown_grace;
        let all_done = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(grace, all_done).await.is_err() {
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
        let unfinished: Vec<_> = self
            .in_flight
            .lock()
            .expect("in-flight map")
            .drain()
            .collect();
        let now = Utc::now();
        for (job, (token, attempt)) in unfinished {
            if let Err(e) = self
                .queue
                .hand_back(job, token, attempt, &self.id, now)
                .await
            {
                tracing::warn!(job_id = %job, error = %e, "could not release job; its lease will expire");
            }
        }
    }

    async fn claim_and_spawn(
        &self,
        now: DateTime<Utc>,
        tasks: &mut JoinSet<()>,
    ) -> Result<Claims, StoreError> {
        let lease = self.lease;
        let mut claims = Claims::default();
        // Read at every round: a pause in any process stops this one's hand-offs from its
        // next round, which the pause's wake-up starts at once. The claim statement also
        // skips a paused destination, so a pause between this read and the claim holds too.
        let holds = self.queue.holds().await?;
        for (name, slots) in &self.per_destination {
            let (room, rate, hand_off) = match self.gate(name, slots, &holds, now).await? {
                Gate::Claim {
                    room,
                    rate,
                    hand_off,
                } => (room, rate, hand_off),
                Gate::Skip => {
                    self.handoff.set_keeping_up(name, false);
                    continue;
                }
                Gate::OutOfRoom => {
                    claims.out_of_room = true;
                    continue;
                }
                Gate::NoToken(next) => {
                    self.handoff.set_keeping_up(name, false);
                    claims.next_token = match (claims.next_token, next) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    continue;
                }
            };
            let jobs = self
                .queue
                .claim(name, room as i64, now, now + lease)
                .await?;
            if let Some(rate) = rate {
                self.queue
                    .give_back_tokens(name, room - jobs.len(), rate)
                    .await?;
            }
            let backlog = jobs.len() == room;
            claims.backlog |= backlog;
            self.handoff.set_keeping_up(name, hand_off && !backlog);
            for job in jobs {
                claims.claimed += 1;
                let permits = match (
                    self.global.clone().try_acquire_owned(),
                    slots.clone().try_acquire_owned(),
                ) {
                    (Ok(global), Ok(local)) => Permits::Held([global, local]),
                    // Ingest's hand-off took the slot after `room` was counted: the job
                    // waits for the next free one, so the caps hold.
                    _ => Permits::WaitFor(self.global.clone(), slots.clone()),
                };
                self.start(job, permits, tasks);
            }
        }
        self.handoff.open(true);
        Ok(claims)
    }

    fn delivery_task(
        &self,
        job: ClaimedJob,
        permits: Permits,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let freed = self.finished.clone();
        let ctx = self
            .deliveries
            .get_or_init(|| {
                let queue = self.queue.clone();
                let pacing = Pacing {
                    linger: self.config.worker.batch_window,
                    ..Pacing::default()
                };
                let outcomes = GroupCommit::start_paced(
                    OUTCOME_WRITERS,
                    OUTCOME_BATCH_MAX,
                    pacing,
                    move |batch: Vec<JobOutcome>| {
                        let queue = queue.clone();
                        async move { queue.finish(&batch).await }
                    },
                );
                Arc::new(deliver::Context {
                    worker_id: self.id.clone(),
                    queue: self.queue.clone(),
                    alerts: self.alerts.clone(),
                    outcomes,
                    config: self.config.clone(),
                    deliverer: self.deliverer.clone(),
                    crash: self.crash.clone(),
                    metrics: self.metrics.clone(),
                    ordered: Arc::new(
                        (self.config.sources.values())
                            .flat_map(|s| s.routes.ordered_destinations())
                            .map(|d| d.to_string())
                            .collect(),
                    ),
                    line_moved: self.line_moved.clone(),
                    leases: leases::LeaseKeeper::start(
                        self.queue.clone(),
                        self.config.worker.lease,
                        self.lease_renewals.clone(),
                    ),
                })
            })
            .clone();
        let in_flight = self.in_flight.clone();
        async move {
            let job_id = job.job_id;
            let slots = deliver::Slots {
                permits: Some(permits.acquire().await),
                freed,
            };
            if ctx.deliver(job, slots).await {
                in_flight.lock().expect("in-flight map").remove(&job_id);
            }
        }
    }
}

/// A delivery's slots (the process's and its destination's).
enum Permits {
    Held([OwnedSemaphorePermit; 2]),
    WaitFor(Arc<Semaphore>, Arc<Semaphore>),
}

impl Permits {
    async fn acquire(self) -> [OwnedSemaphorePermit; 2] {
        match self {
            Self::Held(permits) => permits,
            Self::WaitFor(global, local) => {
                // Neither semaphore is ever closed.
                let global = global.acquire_owned().await.expect("open semaphore");
                let local = local.acquire_owned().await.expect("open semaphore");
                [global, local]
            }
        }
    }
}

/// What one pass of the claim loop found.
#[derive(Debug, Default)]
struct Claims {
    claimed: usize,
    /// A destination's claim filled every slot it asked for: it may have more due jobs.
    backlog: bool,
    /// A destination had no free slot to claim with.
    out_of_room: bool,
    /// A rate-limited destination had no token: when the soonest next one is due.
    next_token: Option<DateTime<Utc>>,
}

/// When the claim loop claims next.
#[derive(Debug, PartialEq, Eq)]
enum NextClaim {
    /// A destination's claim filled every slot it asked for: it may have more due jobs,
    /// claim as slots free.
    Now,
    /// Some due jobs, and every destination got fewer than its room: the queue is keeping
    /// up, so let the next jobs gather for the batch window instead of claiming them one or
    /// two at a time. Each claim is a statement whose fixed cost (planning, a round trip, a
    /// commit) dwarfs its per-row cost at that size (see docs/decisions/).
    After(Duration),
    /// Nothing due, or no room: wait for a new job, a freed slot or the poll interval.
    OnWake,
}

fn next_claim(claimed: usize, backlog: bool, batch_window: Duration) -> NextClaim {
    if claimed == 0 {
        NextClaim::OnWake
    } else if !backlog && !batch_window.is_zero() {
        NextClaim::After(batch_window)
    } else {
        NextClaim::Now
    }
}

/// Sleeps for `d`; true when shutdown was asked meanwhile.
async fn wait_or_shutdown(shutdown: &mut watch::Receiver<bool>, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => *shutdown.borrow(),
        _ = shutdown.changed() => true,
    }
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_loop_waits_for_a_batch_only_when_the_queue_is_keeping_up() {
        let window = Duration::from_millis(5);
        assert_eq!(next_claim(32, true, window), NextClaim::Now, "backlog");
        assert_eq!(next_claim(3, false, window), NextClaim::After(window));
        assert_eq!(
            next_claim(0, false, window),
            NextClaim::OnWake,
            "nothing due"
        );
        assert_eq!(next_claim(3, false, Duration::ZERO), NextClaim::Now, "off");
    }
}
