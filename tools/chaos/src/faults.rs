//! The fault injector: two seeded loops while the load runs.
//! - kills: every `kill_every` (random within the range) a random running hookgate process
//!   gets SIGKILL; the supervisor restarts it after a random 0.5–3 s.
//! - other faults: every `fault_every`, the next card of a shuffled deck: PostgreSQL restart
//!   (fast or immediate), `pg_terminate_backend` of every hookgate connection, a window of
//!   sink 500s, a window of sink stalls, a pause (SIGSTOP, then SIGCONT) of a random process
//!   for longer than the worker lease, a gateway outage (both PostgreSQL API processes killed
//!   and held down for seconds, then started again), a broker restart (the run's NATS server
//!   killed with SIGKILL, held down for seconds, then started again on its store). The deck
//!   makes every kind come up in short runs.
//!
//! Unless told otherwise, a fault that would interrupt a reconciliation run (kill -9 of a
//! worker, a PostgreSQL restart, cut connections) first waits, a few seconds at most, for the
//! run to end: a run interrupted mid-way holds its source's lease until it expires, within
//! 50 s (docs/RECOVERY.md), which would lengthen a CI run's drain.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::broker::Broker;
use crate::cluster::Cluster;
use crate::procs::{Kind, Procs};
use crate::sink::{Mode, SinkState};

#[derive(Debug, Clone, Serialize)]
pub struct FaultEvent {
    /// When it happened (a PostgreSQL restart: when it began), seconds since the run began.
    pub at_secs: f64,
    pub kind: String,
    pub detail: String,
    /// The process slot a kill or a pause hit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// When a fault that lasts ended (a pause resumed, PostgreSQL was back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ends_secs: Option<f64>,
}

#[derive(Clone, Copy)]
pub struct FaultOpts {
    pub kill_every: (Duration, Duration),
    pub fault_every: (Duration, Duration),
    pub restart_delay: (Duration, Duration),
    pub sink_window: (Duration, Duration),
    pub pause: (Duration, Duration),
    pub outage: (Duration, Duration),
    /// Whether faults may interrupt a reconciliation run (otherwise they wait for its end).
    pub interrupt_reconciliation: bool,
}

/// How long a fault waits for a reconciliation run to end before it goes ahead anyway.
const SPARE_WAIT: Duration = Duration::from_secs(3);

pub struct Faults {
    opts: FaultOpts,
    procs: Arc<Procs>,
    cluster: Arc<Cluster>,
    sink: Arc<SinkState>,
    broker: Arc<Broker>,
    started_at: Instant,
    stop: AtomicBool,
    sink_generation: AtomicU64,
    /// Faults that waited for a reconciliation run to end, and those that went ahead while
    /// one still held the lease after `SPARE_WAIT`.
    pub spared: AtomicU64,
    pub spare_gave_up: AtomicU64,
    /// Stopped processes: (slot, pid), resumed when their pause ends or the run stops.
    paused: Mutex<Vec<(usize, u32)>>,
    pub log: Mutex<Vec<FaultEvent>>,
}

#[derive(Debug, Clone, Copy)]
enum Card {
    /// SIGSTOP a random process for longer than the worker lease, then SIGCONT: a paused
    /// worker's jobs are taken over by the other worker; its late result must be fenced off.
    Pause,
    PgRestart,
    PgTerminate,
    Sink500,
    SinkStall,
    /// Both PostgreSQL API processes down for seconds: every POST to them fails, and the
    /// non-retrying provider's events sent meanwhile are lost unless reconciliation finds them.
    Outage,
    /// The NATS server killed with SIGKILL and held down for seconds: publishes in flight
    /// get no acknowledgement and are retried; the stream must end with every event once.
    BrokerRestart,
}

const DECK: [Card; 9] = [
    Card::BrokerRestart,
    Card::Outage,
    Card::Pause,
    Card::PgRestart,
    Card::PgTerminate,
    Card::PgTerminate,
    Card::Sink500,
    Card::Sink500,
    Card::SinkStall,
];

fn between(rng: &mut fastrand::Rng, (lo, hi): (Duration, Duration)) -> Duration {
    if hi <= lo {
        return lo;
    }
    lo + (hi - lo).mul_f64(rng.f64())
}

impl Faults {
    pub fn new(
        opts: FaultOpts,
        procs: Arc<Procs>,
        cluster: Arc<Cluster>,
        sink: Arc<SinkState>,
        broker: Arc<Broker>,
        started_at: Instant,
    ) -> Arc<Faults> {
        Arc::new(Faults {
            opts,
            procs,
            cluster,
            sink,
            broker,
            started_at,
            stop: AtomicBool::new(false),
            sink_generation: AtomicU64::new(0),
            spared: AtomicU64::new(0),
            spare_gave_up: AtomicU64::new(0),
            paused: Mutex::default(),
            log: Mutex::default(),
        })
    }

    fn note(&self, kind: &str, detail: String) {
        let now = self.started_at.elapsed().as_secs_f64();
        self.note_at(FaultEvent {
            at_secs: now,
            kind: kind.to_owned(),
            detail,
            slot: None,
            ends_secs: None,
        });
    }

    fn note_at(&self, event: FaultEvent) {
        eprintln!(
            "chaos: +{:6.1}s fault {}: {}",
            event.at_secs, event.kind, event.detail
        );
        self.log.lock().unwrap().push(event);
    }

    /// A kill or a pause (`lasts`) of slot `i`.
    fn note_process(&self, kind: &str, i: usize, detail: String, lasts: Option<Duration>) {
        let at_secs = self.started_at.elapsed().as_secs_f64();
        self.note_at(FaultEvent {
            at_secs,
            kind: kind.to_owned(),
            detail,
            slot: Some(self.procs.specs[i].name.clone()),
            ends_secs: lasts.map(|d| at_secs + d.as_secs_f64()),
        });
    }

    /// Sleeps, waking early when the run stops; true if it should go on.
    async fn pause(&self, d: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + d;
        while tokio::time::Instant::now() < deadline {
            if self.stop.load(Ordering::SeqCst) {
                return false;
            }
            let left = deadline - tokio::time::Instant::now();
            tokio::time::sleep(left.min(Duration::from_millis(100))).await;
        }
        !self.stop.load(Ordering::SeqCst)
    }

    /// Waits (at most `SPARE_WAIT`) until no reconciliation run holds the non-retrying
    /// provider's lease, unless runs may be interrupted. A failed look (PostgreSQL down)
    /// counts as free: nothing runs then.
    async fn spare_reconciliation(&self) {
        if self.opts.interrupt_reconciliation {
            return;
        }
        let url = self.cluster.url(crate::cluster::DB_NAME);
        let deadline = tokio::time::Instant::now() + SPARE_WAIT;
        let mut waited = false;
        while let Ok(Some(_)) = crate::recovery::lease_until(&url).await {
            if tokio::time::Instant::now() >= deadline {
                self.spare_gave_up.fetch_add(1, Ordering::Relaxed);
                return;
            }
            waited = true;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if waited {
            self.spared.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub async fn kill_loop(self: Arc<Self>, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed);
        while self.pause(between(&mut rng, self.opts.kill_every)).await {
            let up = self.procs.up_slots();
            if up.is_empty() {
                continue;
            }
            let i = up[rng.usize(..up.len())];
            let hold = between(&mut rng, self.opts.restart_delay);
            if self.procs.specs[i].kind == Kind::Worker {
                self.spare_reconciliation().await;
            }
            let procs = self.procs.clone();
            let killed = tokio::task::spawn_blocking(move || procs.kill9(i, hold))
                .await
                .unwrap_or(false);
            if killed {
                let spec = &self.procs.specs[i];
                self.note_process(
                    &format!("kill -9 {}", spec.kind.label()),
                    i,
                    format!("{} (restart in {:.1}s)", spec.name, hold.as_secs_f64()),
                    None,
                );
            }
        }
    }

    pub async fn fault_loop(self: Arc<Self>, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut deck: Vec<Card> = Vec::new();
        while self.pause(between(&mut rng, self.opts.fault_every)).await {
            if deck.is_empty() {
                deck = DECK.to_vec();
                rng.shuffle(&mut deck);
            }
            let card = deck.pop().expect("refilled");
            match card {
                Card::Pause => {
                    let up = self.procs.up_slots();
                    if up.is_empty() {
                        continue;
                    }
                    let i = up[rng.usize(..up.len())];
                    let d = between(&mut rng, self.opts.pause);
                    let Some(pid) = self.procs.signal(i, "STOP") else {
                        continue;
                    };
                    self.paused.lock().unwrap().push((i, pid));
                    let spec = &self.procs.specs[i];
                    self.note_process(
                        &format!("pause (SIGSTOP) {}", spec.kind.label()),
                        i,
                        format!("{} for {:.1}s", spec.name, d.as_secs_f64()),
                        Some(d),
                    );
                    let me = self.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(d).await;
                        let was_paused = {
                            let mut paused = me.paused.lock().unwrap();
                            let before = paused.len();
                            paused.retain(|p| *p != (i, pid));
                            paused.len() != before
                        };
                        if was_paused {
                            me.procs.resume(i, pid);
                        }
                    });
                }
                Card::Outage => {
                    let d = between(&mut rng, self.opts.outage);
                    let procs = self.procs.clone();
                    let api: Vec<usize> = (0..procs.len())
                        .filter(|&i| procs.specs[i].kind == Kind::Api)
                        .collect();
                    let names: Vec<String> =
                        api.iter().map(|&i| procs.specs[i].name.clone()).collect();
                    let _ = tokio::task::spawn_blocking(move || {
                        for i in api {
                            procs.hold_down(i, d);
                        }
                    })
                    .await;
                    self.note(
                        "gateway outage",
                        format!("{} down for {:.1}s", names.join(", "), d.as_secs_f64()),
                    );
                }
                Card::BrokerRestart => {
                    let hold = between(&mut rng, self.opts.restart_delay);
                    self.broker.kill9();
                    self.note(
                        "broker restart",
                        format!("nats-server killed, back in {:.1}s", hold.as_secs_f64()),
                    );
                    if !self.pause(hold).await {
                        return;
                    }
                    if let Err(e) = self.broker.ensure_running().await {
                        self.note("broker restart", format!("FAILED to start again: {e}"));
                    }
                }
                Card::PgRestart => {
                    let immediate = rng.bool();
                    self.spare_reconciliation().await;
                    let cluster = self.cluster.clone();
                    let t = Instant::now();
                    let began = self.started_at.elapsed().as_secs_f64();
                    let result =
                        tokio::task::spawn_blocking(move || cluster.restart(immediate)).await;
                    let mode = if immediate { "immediate" } else { "fast" };
                    match result {
                        Ok(Ok(())) => self.note_at(FaultEvent {
                            at_secs: began,
                            kind: "postgres restart".into(),
                            detail: format!(
                                "-m {mode}, back after {:.1}s",
                                t.elapsed().as_secs_f64()
                            ),
                            slot: None,
                            ends_secs: Some(self.started_at.elapsed().as_secs_f64()),
                        }),
                        Ok(Err(e)) => {
                            self.note("postgres restart", format!("-m {mode} FAILED: {e}"));
                            let cluster = self.cluster.clone();
                            let _ =
                                tokio::task::spawn_blocking(move || cluster.ensure_running()).await;
                        }
                        Err(e) => self.note("postgres restart", format!("panicked: {e}")),
                    }
                }
                Card::PgTerminate => {
                    self.spare_reconciliation().await;
                    match self.cluster.terminate_backends().await {
                        Ok(n) => self.note("pg_terminate_backend", format!("{n} connections cut")),
                        Err(e) => self.note("pg_terminate_backend", format!("FAILED: {e}")),
                    }
                }
                Card::Sink500 | Card::SinkStall => {
                    let (mode, kind) = match card {
                        Card::Sink500 => (Mode::Fail500, "sink 500"),
                        _ => (Mode::Stall, "sink stall"),
                    };
                    let window = between(&mut rng, self.opts.sink_window);
                    self.sink.set_mode(mode);
                    let generation = self.sink_generation.fetch_add(1, Ordering::SeqCst) + 1;
                    self.note(kind, format!("for {:.1}s", window.as_secs_f64()));
                    let me = self.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(window).await;
                        if me.sink_generation.load(Ordering::SeqCst) == generation {
                            me.sink.set_mode(Mode::Ok);
                        }
                    });
                }
            }
        }
    }

    /// Stops injecting and ends any sink window.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.sink_generation.fetch_add(1, Ordering::SeqCst);
        self.sink.set_mode(Mode::Ok);
        for (i, pid) in std::mem::take(&mut *self.paused.lock().unwrap()) {
            self.procs.resume(i, pid);
        }
    }

    pub fn counts(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for e in self.log.lock().unwrap().iter() {
            if e.detail.contains("FAILED") {
                *counts.entry(format!("{} (failed)", e.kind)).or_insert(0) += 1;
            } else {
                *counts.entry(e.kind.clone()).or_insert(0) += 1;
            }
        }
        counts
    }
}
