//! The scenarios, and what they share: the run context and the gateway ingest measurement.

pub mod backlog;
pub mod brokers;
pub mod delivery;
pub mod e2e;
pub mod ingest;
pub mod partitions;
pub mod quarantine_flood;
pub mod quarantine_result;
pub mod route_load;
pub mod route_select;
pub mod routes;
pub mod signatures;
pub mod sqlite_loop;
pub mod sustained;
pub mod topology;
pub mod topology_table;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::gateway::{Gateway, GatewayOpts, GwConfig, Role};
use crate::handler_latency::{self, HandlerLatency};
use crate::loadgen::{self, Ids, LoadReport, LoadSpec, Mode};
use crate::payload::{self, bench_sources, Scheme, SourceSpec};
use crate::pg::PgServer;

/// Everything a scenario needs to know about this run.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub quick: bool,
    pub pg: PgServer,
    pub gw: GatewayOpts,
    pub body_size: usize,
    /// The fixed concurrency of the ingest runs.
    pub concurrency: usize,
    /// Connections available to open-loop (fixed-rate) runs.
    pub rate_connections: usize,
    /// Seconds of a measured run (scaled down by `--quick`).
    pub seconds: u64,
}

impl Ctx {
    /// `full` seconds, or `quick` with `--quick`.
    pub fn secs(&self, full: u64, quick: u64) -> Duration {
        Duration::from_secs(if self.quick { quick } else { full })
    }

    /// The length of a measured ingest run.
    pub fn run_len(&self) -> Duration {
        Duration::from_secs(self.seconds)
    }

    pub fn spec(&self, gw: &Gateway, mode: Mode, duration: Duration, ids: Ids) -> LoadSpec {
        LoadSpec {
            addr: gw.addr(),
            more_addrs: Vec::new(),
            sources: bench_sources(),
            mode,
            duration,
            ids,
            body_size: self.body_size,
            keep_ids: false,
            prebuilt: None,
        }
    }

    pub fn sqlite_url(&self, name: &str) -> String {
        format!("sqlite://{}", self.gw.work_dir.join(name).display())
    }
}

/// Ingest measured on one gateway (role `api`): the maximum at the fixed concurrency, then
/// latency at a fixed rate of half that maximum.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct IngestRun {
    pub max: LoadReport,
    pub half_rate: LoadReport,
    /// The half-rate run as the gateway's own histogram saw it (None: `/metrics` unread).
    pub half_rate_handler: Option<HandlerLatency>,
    /// VmHWM of the gateway after both runs.
    pub peak_rss_mb: f64,
}

pub async fn measure_ingest(ctx: &Ctx, cfg: &GwConfig, tag: &str) -> anyhow::Result<IngestRun> {
    let gw = Gateway::start(&ctx.gw, cfg, Role::Api, tag).await?;
    let warm = ctx.secs(5, 2);
    let conc = Mode::Concurrency(ctx.concurrency);
    let w = loadgen::run(ctx.spec(&gw, conc, warm, Ids::fresh())).await;
    println!("    warm-up {}", w.report.line());
    let max = loadgen::run(ctx.spec(&gw, conc, ctx.run_len(), Ids::fresh()))
        .await
        .report;
    println!("    {}", max.line());
    let rate = Mode::Rate {
        per_sec: (max.throughput / 2.0).max(1.0),
        connections: ctx.rate_connections,
    };
    let before = handler_latency::snapshot(gw.addr()).await;
    let half_rate = loadgen::run(ctx.spec(&gw, rate, ctx.run_len(), Ids::fresh()))
        .await
        .report;
    let half_rate_handler = match (before, handler_latency::snapshot(gw.addr()).await) {
        (Ok(before), Ok(after)) => Some(after.since(&before)),
        (Err(e), _) | (_, Err(e)) => {
            println!("    (the gateway's /metrics could not be read: {e:#})");
            None
        }
    };
    println!("    {}", half_rate.line());
    if let Some(h) = &half_rate_handler {
        println!("    {}", h.line());
    }
    if !half_rate.stalls.is_empty() {
        println!("    slowest windows: {}", half_rate.stalls_line());
    }
    let peak_rss_mb = gw.peak_rss_mb().unwrap_or(0.0);
    println!("    gateway peak RSS {peak_rss_mb:.1} MB");
    gw.stop().await?;
    Ok(IngestRun {
        max,
        half_rate,
        half_rate_handler,
        peak_rss_mb,
    })
}

/// Only the Stripe source (runs whose ids must all belong to one source).
pub fn stripe_only() -> Vec<SourceSpec> {
    bench_sources()
        .into_iter()
        .filter(|s| s.name == "stripe")
        .collect()
}

/// `count` validly signed Stripe requests with fresh ids, built before a segment so that the
/// load generator's signing is not part of what it measures.
pub fn stripe_requests(host: &str, count: usize, body_size: usize) -> Vec<Vec<u8>> {
    let source = stripe_only().remove(0);
    let offset = fastrand::u64(..);
    (0..count as u64)
        .map(|i| {
            let mut out = Vec::with_capacity(body_size + 512);
            let id = payload::event_id(Scheme::Stripe, offset.wrapping_add(i));
            payload::build_request(&mut out, host, &source, &id, body_size);
            out
        })
        .collect()
}

/// A closed-loop load of `stripe_requests` to `addr` at the run's concurrency for `length`,
/// enough of them for `fastest` events/s with room to spare.
pub async fn stripe_load(
    ctx: &Ctx,
    addr: std::net::SocketAddr,
    length: Duration,
    fastest: f64,
) -> anyhow::Result<LoadSpec> {
    let body_size = ctx.body_size;
    let count = (fastest * length.as_secs_f64() * 1.5) as usize + 2_000;
    let prebuilt =
        tokio::task::spawn_blocking(move || stripe_requests(&addr.to_string(), count, body_size))
            .await?;
    Ok(LoadSpec {
        addr,
        more_addrs: Vec::new(),
        sources: Vec::new(),
        mode: Mode::Concurrency(ctx.concurrency),
        duration: length,
        ids: Ids::fresh(),
        body_size,
        keep_ids: false,
        prebuilt: Some(std::sync::Arc::new(prebuilt)),
    })
}
