//! Several processes on one PostgreSQL: hookgate as 2 `--role api` + 2 `--role worker`
//! processes, beside 1 api + 1 worker and one all-in-one (`--role all`), measured side by
//! side in one run: rounds of one segment per topology (the order rotated each round), each
//! on a fresh database. The load generator spreads its connections over the api processes.
//! On one machine every process shares the same cores, so splitting cannot be faster; what
//! a segment measures is what the split costs, and that it stays correct:
//!
//! - at a fixed concurrency, ingest (2xx/s) while the workers deliver; delivery as the
//!   accepted events over the time from the first 2xx to the last of them delivered; the
//!   gateway processes' CPU per event over both;
//! - at a fixed rate, the same for every topology (half the all-in-one's delivery rate in
//!   the first round, unless given), ingest latency and end-to-end latency (the 2xx to the
//!   sink's receipt of the first attempt);
//! - every accepted event delivered, and deliveries of one event more than once.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Ctx;
use crate::gateway::{self, Gateway, GwConfig, Role};
use crate::loadgen::{self, Ids, LoadReport, LoadSpec, Mode};
use crate::sink::Sink;
use crate::stats::{LatencySummary, Samples};

/// The topologies, in the order of the first round: the all-in-one first, since the fixed
/// rate comes from it.
const TOPOLOGIES: [(&str, usize, usize); 3] = [
    ("all-in-one", 0, 0),
    ("1 api + 1 worker", 1, 1),
    ("2 api + 2 worker", 2, 2),
];

/// How long a segment's accepted events may take to be delivered.
const DELIVERY_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub rounds: usize,
    pub seconds: u64,
    /// The fixed rate of the latency runs (None: half the all-in-one's delivery rate).
    pub rate: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Segment {
    pub round: usize,
    /// Fixed concurrency, spread over the api processes.
    pub ingest: LoadReport,
    pub accepted: u64,
    pub delivered: u64,
    /// Accepted events / seconds from the first 2xx to the last of them delivered.
    pub delivery_per_s: f64,
    /// CPU of every gateway process of the topology over the run and its delivery, per
    /// accepted event, microseconds.
    pub cpu_us_per_event: f64,
    /// Over the same: the database's committed transactions, and the server's WAL syncs
    /// (`pg_stat_wal`), per accepted event.
    pub commits_per_event: f64,
    pub wal_syncs_per_event: f64,
    pub at_rate: LoadReport,
    pub at_rate_accepted: u64,
    pub at_rate_delivered: u64,
    pub e2e: LatencySummary,
    /// Events delivered (answered 200) more than once, both runs.
    pub duplicates: u64,
}

impl Segment {
    fn missing(&self) -> u64 {
        (self.accepted - self.delivered) + (self.at_rate_accepted - self.at_rate_delivered)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TopologyRun {
    pub name: String,
    pub api: usize,
    pub workers: usize,
    pub segments: Vec<Segment>,
    /// Means over the rounds.
    pub ingest_per_s: f64,
    pub delivery_per_s: f64,
    pub cpu_us_per_event: f64,
    pub commits_per_event: f64,
    pub wal_syncs_per_event: f64,
    pub ingest_p50_ms: f64,
    pub ingest_p99_ms: f64,
    pub e2e_p50_ms: f64,
    pub e2e_p99_ms: f64,
    /// Sums over the rounds.
    pub missing: u64,
    pub duplicates: u64,
    pub non_2xx: u64,
    /// Every fixed-rate run kept up with its rate.
    pub kept_up: bool,
    /// Ingest against the all-in-one's in the same round, one a round.
    pub ingest_ratio_rounds: Vec<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Topologies {
    pub rounds: usize,
    pub seconds: u64,
    pub concurrency: usize,
    pub rate: f64,
    pub rate_from: String,
    pub runs: Vec<TopologyRun>,
}

pub async fn run(ctx: &Ctx, sizes: Sizes) -> anyhow::Result<Topologies> {
    let sink = Sink::start("127.0.0.1:0").await?;
    let mut out = Topologies {
        rounds: sizes.rounds,
        seconds: sizes.seconds,
        concurrency: ctx.concurrency,
        rate: sizes.rate.unwrap_or(0.0),
        rate_from: if sizes.rate.is_some() {
            "given".into()
        } else {
            "half the all-in-one's delivery rate in round 1".into()
        },
        runs: TOPOLOGIES
            .iter()
            .map(|&(name, api, workers)| TopologyRun {
                name: name.into(),
                api,
                workers,
                ..Default::default()
            })
            .collect(),
    };
    for round in 1..=sizes.rounds {
        for k in 0..TOPOLOGIES.len() {
            let t = (round - 1 + k) % TOPOLOGIES.len();
            let (name, api, workers) = TOPOLOGIES[t];
            println!("  round {round}: {name}");
            let db = ctx.pg.create_db("topology").await?;
            let seg = segment(
                ctx,
                &sink,
                &db,
                (api, workers),
                &mut out.rate,
                sizes.seconds,
            )
            .await;
            ctx.pg.drop_db(&db).await;
            let mut seg = seg?;
            seg.round = round;
            out.runs[t].segments.push(seg);
        }
    }
    for r in &mut out.runs {
        r.summarize();
    }
    let base: Vec<f64> = out.runs[0]
        .segments
        .iter()
        .map(|s| s.ingest.throughput)
        .collect();
    for r in &mut out.runs {
        r.ingest_ratio_rounds = (r.segments.iter().zip(&base))
            .map(|(s, b)| s.ingest.throughput / b)
            .collect();
    }
    let base = &out.runs[0];
    for r in &out.runs[1..] {
        println!(
            "  => {} vs all-in-one: ingest {:.2}×, delivery {:.2}×, CPU per event {:.2}×, e2e p50 {:.2} vs {:.2} ms",
            r.name,
            r.ingest_per_s / base.ingest_per_s,
            r.delivery_per_s / base.delivery_per_s,
            r.cpu_us_per_event / base.cpu_us_per_event,
            r.e2e_p50_ms,
            base.e2e_p50_ms
        );
    }
    Ok(out)
}

/// One topology's processes, all-in-one when both counts are 0; the ingest processes
/// first, and how many they are.
async fn start(
    ctx: &Ctx,
    cfg: &GwConfig,
    (api, workers): (usize, usize),
) -> anyhow::Result<(Vec<Gateway>, usize)> {
    gateway::migrate(&ctx.gw, cfg)?;
    let mut procs = Vec::new();
    if api == 0 {
        procs.push(Gateway::start(&ctx.gw, cfg, Role::All, "topology-all").await?);
    }
    for i in 0..api {
        procs.push(Gateway::start(&ctx.gw, cfg, Role::Api, &format!("topology-api-{i}")).await?);
    }
    for i in 0..workers {
        procs.push(
            Gateway::start(&ctx.gw, cfg, Role::Worker, &format!("topology-worker-{i}")).await?,
        );
    }
    Ok((procs, api.max(1)))
}

fn cpu(procs: &[Gateway]) -> f64 {
    procs.iter().filter_map(Gateway::cpu_seconds).sum()
}

/// The load, spread over the ingest processes `ingest` (a worker listens too, for its
/// health and metrics, and answers 404 to webhooks).
fn spec(ctx: &Ctx, ingest: &[Gateway], mode: Mode, duration: Duration) -> LoadSpec {
    let mut addrs = ingest.iter().filter_map(|g| g.addr);
    let first = addrs.next().expect("an ingest process");
    let mut spec = ctx.spec(&ingest[0], mode, duration, Ids::fresh());
    spec.addr = first;
    spec.more_addrs = addrs.collect();
    spec.keep_ids = true;
    spec
}

async fn segment(
    ctx: &Ctx,
    sink: &Sink,
    db: &str,
    shape: (usize, usize),
    fixed_rate: &mut f64,
    seconds: u64,
) -> anyhow::Result<Segment> {
    let cfg = GwConfig::new(ctx.pg.url(db), sink.url());
    let (procs, ingest) = start(ctx, &cfg, shape).await?;
    let ingest = &procs[..ingest];
    let conc = Mode::Concurrency(ctx.concurrency);
    let warm = loadgen::run(spec(ctx, ingest, conc, ctx.secs(2, 1))).await;
    wait_for(sink, warm.report.ok_2xx).await;
    sink.state.reset();

    let pool = ctx.pg.pool(db, 1).await?;
    let (commits_before, syncs_before) = pg_counters(&pool).await?;
    let cpu_before = cpu(&procs);
    let len = Duration::from_secs(seconds);
    let out = loadgen::run(spec(ctx, ingest, conc, len)).await;
    println!("    {}", out.report.line());
    let accepted = out.accepted.len() as u64;
    wait_for(sink, accepted).await;
    let cpu_used = cpu(&procs) - cpu_before;
    let (commits, syncs) = pg_counters(&pool).await?;
    let per_event = |n: i64| n as f64 / accepted.max(1) as f64;
    let (commits_per_event, wal_syncs_per_event) = (
        per_event(commits - commits_before),
        per_event(syncs - syncs_before),
    );
    let receipts = Receipts::take(sink);
    let (delivered, last) = receipts.delivered(&out.accepted);
    let first_2xx = out.accepted.iter().map(|(_, at)| *at).min();
    let span = match (first_2xx, last) {
        (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
        _ => 0.0,
    };
    let delivery_per_s = if span > 0.0 {
        delivered as f64 / span
    } else {
        0.0
    };
    let cpu_us_per_event = cpu_used * 1e6 / accepted.max(1) as f64;
    println!(
        "    delivered {delivered}/{accepted} at {delivery_per_s:.0}/s; CPU {cpu_us_per_event:.1} µs per event over {} processes; per event {commits_per_event:.3} commits, {wal_syncs_per_event:.3} WAL syncs",
        procs.len()
    );
    if *fixed_rate <= 0.0 {
        *fixed_rate = (delivery_per_s / 2.0).max(1.0).round();
        println!("    fixed rate for every topology: {fixed_rate:.0}/s");
    }

    let mode = Mode::Rate {
        per_sec: *fixed_rate,
        connections: ctx.rate_connections,
    };
    let at = loadgen::run(spec(ctx, ingest, mode, len)).await;
    println!("    {}", at.report.line());
    let at_accepted = at.accepted.len() as u64;
    wait_for(sink, at_accepted).await;
    let at_receipts = Receipts::take(sink);
    let (at_delivered, _) = at_receipts.delivered(&at.accepted);
    let e2e = at_receipts.latency(&at.accepted);
    println!(
        "    end-to-end p50 {:.2} ms, p99 {:.2} ms ({at_delivered}/{at_accepted} delivered)",
        e2e.p50_ms, e2e.p99_ms
    );
    for p in procs {
        p.stop().await?;
    }
    pool.close().await;
    Ok(Segment {
        round: 0,
        ingest: out.report,
        accepted,
        delivered,
        delivery_per_s,
        cpu_us_per_event,
        commits_per_event,
        wal_syncs_per_event,
        at_rate: at.report,
        at_rate_accepted: at_accepted,
        at_rate_delivered: at_delivered,
        e2e,
        duplicates: receipts.duplicates + at_receipts.duplicates,
    })
}

/// The database's committed transactions and the server's WAL syncs so far. A backend
/// reports its counts when it goes idle; the delivery wait before the second reading leaves
/// time for that.
async fn pg_counters(pool: &sqlx::PgPool) -> anyhow::Result<(i64, i64)> {
    Ok(sqlx::query_as(
        "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), \
                (SELECT wal_sync FROM pg_stat_wal)",
    )
    .fetch_one(pool)
    .await?)
}

/// What the sink received since its last reset: the first accepted first attempt of each
/// event, and how many events it accepted more than once.
struct Receipts {
    first: HashMap<String, Instant>,
    duplicates: u64,
}

impl Receipts {
    fn take(sink: &Sink) -> Self {
        let mut first = HashMap::new();
        let mut oks: HashMap<String, u32> = HashMap::new();
        for r in sink.state.take_receipts() {
            if r.status != 200 {
                continue;
            }
            *oks.entry(r.webhook_id.clone()).or_default() += 1;
            if r.attempt == 1 {
                first.entry(r.webhook_id).or_insert(r.at);
            }
        }
        sink.state.reset();
        let duplicates = oks.values().filter(|&&n| n > 1).count() as u64;
        Self { first, duplicates }
    }

    /// How many of `accepted` were delivered, and when the last of them was.
    fn delivered(&self, accepted: &[(String, Instant)]) -> (u64, Option<Instant>) {
        let at: Vec<Instant> = accepted
            .iter()
            .filter_map(|(id, _)| self.first.get(id).copied())
            .collect();
        (at.len() as u64, at.into_iter().max())
    }

    /// From each 2xx to its event's delivery (0 when the delivery came first).
    fn latency(&self, accepted: &[(String, Instant)]) -> LatencySummary {
        let mut samples = Samples::with_capacity(accepted.len());
        for (id, ok_at) in accepted {
            if let Some(at) = self.first.get(id) {
                samples.record(at.saturating_duration_since(*ok_at));
            }
        }
        samples.summary()
    }
}

/// Waits until the sink has answered `n` deliveries 200, or `DELIVERY_WAIT` passed (a
/// deadline-bounded poll).
async fn wait_for(sink: &Sink, n: u64) {
    let deadline = Instant::now() + DELIVERY_WAIT;
    while sink.state.ok.load(Ordering::Relaxed) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl TopologyRun {
    fn summarize(&mut self) {
        let n = self.segments.len().max(1) as f64;
        let mean = |f: &dyn Fn(&Segment) -> f64| self.segments.iter().map(f).sum::<f64>() / n;
        self.ingest_per_s = mean(&|s| s.ingest.throughput);
        self.delivery_per_s = mean(&|s| s.delivery_per_s);
        self.cpu_us_per_event = mean(&|s| s.cpu_us_per_event);
        self.commits_per_event = mean(&|s| s.commits_per_event);
        self.wal_syncs_per_event = mean(&|s| s.wal_syncs_per_event);
        self.ingest_p50_ms = mean(&|s| s.at_rate.latency.p50_ms);
        self.ingest_p99_ms = mean(&|s| s.at_rate.latency.p99_ms);
        self.e2e_p50_ms = mean(&|s| s.e2e.p50_ms);
        self.e2e_p99_ms = mean(&|s| s.e2e.p99_ms);
        self.missing = self.segments.iter().map(Segment::missing).sum();
        self.duplicates = self.segments.iter().map(|s| s.duplicates).sum();
        self.non_2xx = (self.segments.iter())
            .map(|s| {
                s.ingest.non_2xx + s.ingest.conn_errors + s.at_rate.non_2xx + s.at_rate.conn_errors
            })
            .sum();
        self.kept_up = self.segments.iter().all(|s| s.at_rate.kept_up());
    }

    /// Correct: every accepted event delivered, none twice, every request answered 2xx.
    pub fn correct(&self) -> bool {
        self.missing == 0 && self.duplicates == 0 && self.non_2xx == 0
    }
}
