//! Ingest through the gateway on PostgreSQL: this build (the time-partitioned layout, dedupe
//! keys in `event_keys`) against a baseline binary built before partitioning (commit
//! b66f21d: plain tables, the UNIQUE key on `events`), each on a fresh database its own
//! binary migrated, side by side in alternated segments. The SQL-level comparison in
//! `load.rs` isolates the statements; this one is what a user sees: HTTP, verification,
//! group commit and the answer after the commit, the whole path of each build.

use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::gateway::{Gateway, GwConfig, Role};
use crate::loadgen::{self, LoadReport};
use crate::scenarios::route_load::NO_SINK;
use crate::scenarios::signatures::Baseline;
use crate::scenarios::Ctx;

/// One build's legs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GatewaySide {
    pub build: String,
    pub events: u64,
    pub seconds: f64,
    pub events_per_s: f64,
    /// Events/s of each segment, in round order.
    pub per_round: Vec<f64>,
    pub p99_ms_per_round: Vec<f64>,
    /// The gateway process's CPU per event over the rounds.
    pub cpu_us_per_event: f64,
    pub non_2xx: u64,
    pub conn_errors: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PartitionsGateway {
    pub concurrency: usize,
    pub seconds_per_segment: u64,
    pub rounds: usize,
    pub postgres: String,
    pub current: GatewaySide,
    pub baseline: GatewaySide,
    /// This build's events/s / the baseline's, pooled over the rounds.
    pub ratio: f64,
    pub ratio_per_round: Vec<f64>,
}

pub async fn run(ctx: &Ctx, baseline: &Baseline) -> anyhow::Result<PartitionsGateway> {
    let (rounds, seconds) = if ctx.quick { (2, 3) } else { (6, 10) };
    let mut dbs = Vec::new();
    for tag in ["current", "baseline"] {
        dbs.push(ctx.pg.create_db(&format!("part_gw_{tag}")).await?);
    }
    let result = measure(ctx, baseline, &dbs, rounds, seconds).await;
    for db in &dbs {
        ctx.pg.drop_db(db).await;
    }
    let mut out = result?;
    out.postgres = format!(
        "PostgreSQL {} (shared_buffers={}, synchronous_commit={})",
        ctx.pg.setting("server_version").await.unwrap_or_default(),
        ctx.pg.setting("shared_buffers").await.unwrap_or_default(),
        ctx.pg
            .setting("synchronous_commit")
            .await
            .unwrap_or_default(),
    );
    println!(
        "  => this build {:.0} / {} {:.0} events/s = {:.3}x (rounds: {})",
        out.current.events_per_s,
        out.baseline.build,
        out.baseline.events_per_s,
        out.ratio,
        crate::stats::ratios_line(&out.ratio_per_round)
    );
    Ok(out)
}

async fn measure(
    ctx: &Ctx,
    baseline: &Baseline,
    dbs: &[String],
    rounds: usize,
    seconds: u64,
) -> anyhow::Result<PartitionsGateway> {
    let current = Gateway::start(
        &ctx.gw,
        &GwConfig::new(ctx.pg.url(&dbs[0]), NO_SINK),
        Role::Api,
        "partitions-current",
    )
    .await?;
    let mut old_opts = ctx.gw.clone();
    old_opts.bin = std::fs::canonicalize(&baseline.bin)
        .with_context(|| format!("the baseline gateway {}", baseline.bin.display()))?;
    let old = Gateway::start(
        &old_opts,
        &GwConfig::new(ctx.pg.url(&dbs[1]), NO_SINK),
        Role::Api,
        "partitions-baseline",
    )
    .await?;
    let gateways = [&current, &old];
    let mut sides = [
        GatewaySide {
            build: "this build".into(),
            ..Default::default()
        },
        GatewaySide {
            build: format!("baseline {}", baseline.label),
            ..Default::default()
        },
    ];
    let length = Duration::from_secs(seconds);
    let mut fastest = 5_000.0_f64;
    for (gw, side) in gateways.iter().zip(&sides) {
        let (r, _) = segment(ctx, gw, length / 2, fastest).await?;
        println!("    warm-up {:>16}: {}", side.build, r.line());
        r.warm_up_ok(&side.build, &gw.log)?;
        fastest = fastest.max(r.throughput);
    }
    let mut cpu = [0.0_f64; 2];
    for round in 0..rounds {
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let (r, cpu_s) = segment(ctx, gateways[i], length, fastest).await?;
            fastest = fastest.max(r.throughput);
            println!("    round {round} {:>16}: {}", sides[i].build, r.line());
            let side = &mut sides[i];
            side.events += r.ok_2xx;
            side.seconds += r.duration_s;
            side.per_round.push(r.throughput);
            side.p99_ms_per_round.push(r.latency.p99_ms);
            side.non_2xx += r.non_2xx;
            side.conn_errors += r.conn_errors;
            cpu[i] += cpu_s;
        }
    }
    current.stop().await?;
    old.stop().await?;
    for (side, cpu_s) in sides.iter_mut().zip(cpu) {
        side.events_per_s = side.events as f64 / side.seconds.max(1e-9);
        side.cpu_us_per_event = cpu_s * 1e6 / side.events.max(1) as f64;
    }
    let [current, baseline] = sides;
    Ok(PartitionsGateway {
        concurrency: ctx.concurrency,
        seconds_per_segment: seconds,
        rounds,
        ratio: current.events_per_s / baseline.events_per_s.max(1e-9),
        ratio_per_round: crate::stats::per_round(&current.per_round, &baseline.per_round),
        current,
        baseline,
        ..Default::default()
    })
}

/// Valid Stripe ingest on `gw` at the fixed concurrency for `length`, requests built and
/// signed beforehand; the report and the gateway's CPU seconds meanwhile.
async fn segment(
    ctx: &Ctx,
    gw: &Gateway,
    length: Duration,
    fastest: f64,
) -> anyhow::Result<(LoadReport, f64)> {
    let spec = crate::scenarios::stripe_load(ctx, gw.addr(), length, fastest).await?;
    let before = gw.cpu_seconds();
    let report = loadgen::run(spec).await.report;
    let cpu = match (before, gw.cpu_seconds()) {
        (Some(a), Some(b)) => b - a,
        _ => 0.0,
    };
    Ok((report, cpu))
}

impl PartitionsGateway {
    pub fn table_row(&self, s: &mut String) {
        use crate::markdown::{met, rate, ratio_range};
        use std::fmt::Write as _;
        let _ = writeln!(
            s,
            "| Ingest through the gateway, time-partitioned build vs the build before partitioning ({}), PostgreSQL, {} alternated rounds of {} s | ≥ 0.95× | {} vs {} events/s at concurrency {} (per round {}) | {:.3}× | {} |",
            self.baseline.build,
            self.rounds,
            self.seconds_per_segment,
            rate(self.current.events_per_s),
            rate(self.baseline.events_per_s),
            self.concurrency,
            ratio_range(&self.ratio_per_round),
            self.ratio,
            met(self.ratio >= 0.95)
        );
    }

    pub fn details(&self, s: &mut String) {
        use crate::markdown::rate;
        use std::fmt::Write as _;
        let _ = writeln!(
            s,
            "\nIngest through the gateway, partitioned build vs the build before partitioning ({}; role `api`, fresh databases each build migrated itself, valid Stripe requests signed beforehand):\n\n| build | events/s | per round | p99 per round | gateway CPU per event | non-2xx |\n| --- | --- | --- | --- | --- | --- |",
            self.postgres
        );
        for side in [&self.current, &self.baseline] {
            let join = |v: &[f64], f: &dyn Fn(f64) -> String| {
                v.iter().map(|x| f(*x)).collect::<Vec<_>>().join(", ")
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} ms | {:.1} µs | {} |",
                side.build,
                rate(side.events_per_s),
                join(&side.per_round, &rate),
                join(&side.p99_ms_per_round, &|x| format!("{x:.1}")),
                side.cpu_us_per_event,
                side.non_2xx + side.conn_errors
            );
        }
    }
}
