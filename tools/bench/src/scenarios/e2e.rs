//! End-to-end latency on PostgreSQL: from the ingest 2xx to the sink receiving the delivery,
//! with one all-in-one gateway (role `all`, LISTEN/NOTIFY wake-ups) at half the maximum
//! ingest rate; and, when the sustained rate is known, first at half of that, where the
//! gateway is not saturated and the figure is the wake-up path rather than a queue.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Ctx, IngestRun};
use crate::gateway::{Gateway, GwConfig, Role};
use crate::loadgen::{self, Ids, LoadReport, Mode};
use crate::sink::Sink;
use crate::stats::{LatencySummary, Samples};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct E2eRun {
    pub rate: f64,
    pub ingest: LoadReport,
    pub accepted: u64,
    pub delivered: u64,
    /// Accepted but not delivered within the drain time.
    pub missing: u64,
    /// Deliveries that reached the sink before the load generator had read the 2xx.
    pub before_2xx: u64,
    pub latency: LatencySummary,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct E2e {
    /// The maximum ingest rate halved here, and where it came from.
    pub max_rate: f64,
    pub max_rate_from: String,
    pub at_half_max: E2eRun,
    /// At half the highest rate the all-in-one gateway sustained (scenario `sustained`).
    pub at_half_sustained: Option<E2eRun>,
    pub peak_rss_mb: f64,
}

/// `max`: the ingest scenario's result, when it ran; `sustained`: the sustained rate.
pub async fn run(
    ctx: &Ctx,
    max: Option<&IngestRun>,
    sustained: Option<f64>,
) -> anyhow::Result<E2e> {
    let (max_rate, from) = match max {
        Some(r) => (r.max.throughput, "ingest-pg (same run)".to_owned()),
        None => (
            measure_max(ctx).await?,
            "measured here (api role)".to_owned(),
        ),
    };
    let db = ctx.pg.create_db("e2e").await?;
    let result = async {
        let sink = Sink::start("127.0.0.1:0").await?;
        let cfg = GwConfig::new(ctx.pg.url(&db), sink.url());
        let gw = Gateway::start(&ctx.gw, &cfg, Role::All, "e2e").await?;
        let at_half_sustained = match sustained {
            Some(r) if r > 0.0 => Some(measure(ctx, &gw, &sink, r / 2.0).await?),
            _ => None,
        };
        let at_half_max = measure(ctx, &gw, &sink, max_rate / 2.0).await?;
        let peak_rss_mb = gw.peak_rss_mb().unwrap_or(0.0);
        gw.stop().await?;
        anyhow::Ok(E2e {
            max_rate,
            max_rate_from: from,
            at_half_max,
            at_half_sustained,
            peak_rss_mb,
        })
    }
    .await;
    ctx.pg.drop_db(&db).await;
    result
}

async fn measure_max(ctx: &Ctx) -> anyhow::Result<f64> {
    let db = ctx.pg.create_db("e2emax").await?;
    let cfg = GwConfig::new(ctx.pg.url(&db), "http://127.0.0.1:9/unused");
    let r = async {
        let gw = Gateway::start(&ctx.gw, &cfg, Role::Api, "e2e-max").await?;
        let mode = Mode::Concurrency(ctx.concurrency);
        let d = ctx.secs(10, 3);
        let report = loadgen::run(ctx.spec(&gw, mode, d, Ids::fresh()))
            .await
            .report;
        println!("    max ingest: {}", report.line());
        gw.stop().await?;
        anyhow::Ok(report.throughput)
    }
    .await;
    ctx.pg.drop_db(&db).await;
    r
}

async fn measure(ctx: &Ctx, gw: &Gateway, sink: &Sink, rate: f64) -> anyhow::Result<E2eRun> {
    let rate = rate.max(1.0);
    let mode = Mode::Rate {
        per_sec: rate,
        connections: ctx.rate_connections,
    };
    // Warm-up, then let its deliveries land before measuring.
    let warm = loadgen::run(ctx.spec(gw, mode, ctx.secs(3, 1), Ids::fresh())).await;
    wait_for(sink, warm.report.ok_2xx, Duration::from_secs(30)).await;
    sink.state.reset();

    let mut spec = ctx.spec(gw, mode, ctx.run_len(), Ids::fresh());
    spec.keep_ids = true;
    let out = loadgen::run(spec).await;
    println!("    {}", out.report.line());
    let accepted = out.accepted.len() as u64;
    wait_for(sink, accepted, Duration::from_secs(60)).await;

    let mut first: HashMap<String, Instant> = HashMap::new();
    for r in sink.state.take_receipts() {
        if r.attempt == 1 && r.status == 200 {
            first.entry(r.webhook_id).or_insert(r.at);
        }
    }
    sink.state.reset();
    let mut samples = Samples::with_capacity(out.accepted.len());
    let (mut delivered, mut before) = (0u64, 0u64);
    for (id, ok_at) in &out.accepted {
        if let Some(at) = first.get(id) {
            delivered += 1;
            if at < ok_at {
                before += 1;
            }
            samples.record(at.saturating_duration_since(*ok_at));
        }
    }
    let latency = samples.summary();
    println!(
        "  => end-to-end at {rate:.0}/s: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms ({delivered}/{accepted} delivered)",
        latency.p50_ms, latency.p99_ms, latency.p999_ms
    );
    Ok(E2eRun {
        rate,
        ingest: out.report,
        accepted,
        delivered,
        missing: accepted - delivered,
        before_2xx: before,
        latency,
    })
}

/// Waits until the sink has answered `n` deliveries 200, or `limit` passed.
async fn wait_for(sink: &Sink, n: u64, limit: Duration) {
    let deadline = Instant::now() + limit;
    while sink.state.ok.load(Ordering::Relaxed) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
