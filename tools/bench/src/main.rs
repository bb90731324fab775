//! hookgate-bench: the benchmark suite (see bench/README.md). `all` runs every scenario and
//! writes the JSON results and the markdown table; each scenario also runs alone; `loadgen`
//! and `sink` are the load generator and the receiving end on their own.

mod cli;
mod cpu;
mod gateway;
mod handler_latency;
mod http1;
mod loadgen;
mod markdown;
mod payload;
mod pg;
mod pgbench;
mod report;
mod scenarios;
mod server;
mod sink;
mod stats;
mod tools;
mod writeback;

use hookgate_pgcluster as cluster;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

use cli::Common;
use gateway::GatewayOpts;
use report::Results;
use scenarios::{
    backlog, brokers, delivery, e2e, ingest, partitions, quarantine_flood, routes, signatures,
    sustained, topology, Ctx,
};

#[derive(Debug, Parser)]
#[command(name = "hookgate-bench", about = "Benchmarks for the hookgate gateway")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Every scenario in turn; writes the JSON results and the markdown table.
    All(Common),
    /// PostgreSQL ingest at fixed concurrency vs the pgbench ceiling, latency at half rate, RSS.
    IngestPg(Common),
    /// SQLite ingest vs a plain insert loop, latency at half rate, RSS.
    IngestSqlite(Common),
    /// End-to-end latency (ingest 2xx to sink) at half the max ingest rate, PostgreSQL (and
    /// at half the sustained rate, when known).
    E2e {
        #[command(flatten)]
        common: Common,
        /// The maximum ingest rate to halve (default: measure it first).
        #[arg(long)]
        max_rate: Option<f64>,
    },
    /// Deliveries per second from a backlog, clean and with 1 in 10 failing.
    Delivery(Common),
    /// Highest ingest rate an all-in-one gateway sustains with bounded delivery lag.
    Sustained {
        #[command(flatten)]
        common: Common,
        /// Rates to step through, events/s (stops at the first unbounded one).
        #[arg(long, value_delimiter = ',')]
        rates: Option<Vec<f64>>,
    },
    /// Ingest and claim latency with 0 / 1M / 10M events stored.
    Backlog {
        #[command(flatten)]
        common: Common,
        /// Stored-event counts to measure at, ascending.
        #[arg(long, value_delimiter = ',')]
        sizes: Option<Vec<u64>>,
    },
    /// Ingest with Ed25519 (Standard Webhooks v1a) against HMAC (v1) signatures on every
    /// request, alternated on one gateway (and HMAC on a baseline gateway binary); then
    /// verification alone for HMAC, Ed25519 and ECDSA P-256.
    Signatures(Common),
    /// Ingest of the same events to a source with ten filtered routes against a source with
    /// one plain destination, alternated on one gateway.
    Routes(Common),
    /// Valid ingest alone, under a flood of badly signed requests with the quarantine on, and
    /// under the same flood with it off: two gateways side by side, alternated.
    QuarantineFlood(Common),
    /// 2 api + 2 worker processes on one PostgreSQL against 1 api + 1 worker and one
    /// all-in-one, side by side: ingest, delivery, latencies, CPU per event, correctness.
    Topology(Common),
    /// Hand-off to NATS JetStream and RabbitMQ from a backlog, each against a plain
    /// publish-and-await-ack loop with the same client, size and concurrency.
    Brokers(Common),
    /// PostgreSQL's time-partitioned layout against the unpartitioned one before it: ingest
    /// statement rate, removing a day of stored events (time, WAL, ingest latency beside it),
    /// and the migration's duration per million events.
    Partitions(Common),
    /// Ingest through the gateway on PostgreSQL, this build against a baseline binary built
    /// before partitioning (`--baseline-hookgate`), alternated segments.
    PartitionsGateway(Common),
    /// Send signed webhooks to a running gateway and report throughput and latency.
    Loadgen(tools::LoadgenArgs),
    /// Run the benchmark sink until Ctrl-C, printing what it receives each second.
    Sink {
        #[arg(long, default_value = "127.0.0.1:9000")]
        listen: String,
        /// Answer 500 to one in N first attempts (0: never).
        #[arg(long, default_value_t = 0)]
        fail_one_in: u64,
    },
    /// Regenerate the markdown table from a results file.
    Report {
        #[arg(long, default_value = "bench/results/latest.json")]
        json: PathBuf,
        #[arg(long, default_value = "bench/RESULTS.md")]
        markdown: PathBuf,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Loadgen(a) => return tools::loadgen(a).await,
        Cmd::Sink {
            listen,
            fail_one_in,
        } => return tools::sink(&listen, fail_one_in).await,
        Cmd::Report { json, markdown } => {
            let results = report::load_json(&json)?;
            report::write_markdown(&results, &markdown)?;
            println!("wrote {}", markdown.display());
            return Ok(());
        }
        _ => {}
    }
    let (name, common) = match &cli.command {
        Cmd::All(c) => ("all", c),
        Cmd::IngestPg(c) => ("ingest-pg", c),
        Cmd::IngestSqlite(c) => ("ingest-sqlite", c),
        Cmd::E2e { common, .. } => ("e2e", common),
        Cmd::Delivery(c) => ("delivery", c),
        Cmd::Sustained { common, .. } => ("sustained", common),
        Cmd::Backlog { common, .. } => ("backlog", common),
        Cmd::Signatures(c) => ("signatures", c),
        Cmd::Routes(c) => ("routes", c),
        Cmd::QuarantineFlood(c) => ("quarantine-flood", c),
        Cmd::Topology(c) => ("topology", c),
        Cmd::Brokers(c) => ("brokers", c),
        Cmd::Partitions(c) => ("partitions", c),
        Cmd::PartitionsGateway(c) => ("partitions-gateway", c),
        Cmd::Loadgen(_) | Cmd::Sink { .. } | Cmd::Report { .. } => unreachable!("handled above"),
    };
    let work_dir = std::env::temp_dir().join(format!("hookgate-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work_dir)?;
    let server = server::Server::start(
        common.pg.as_deref(),
        &work_dir.join("pg"),
        common.keep_host_writeback,
    )
    .await?;
    let outcome = tokio::select! {
        r = run(&cli, name, common, &server, work_dir.clone()) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    server.stop();
    let _ = std::fs::remove_dir_all(&work_dir);
    outcome
}

async fn run(
    cli: &Cli,
    name: &str,
    common: &Common,
    server: &server::Server,
    work_dir: PathBuf,
) -> anyhow::Result<()> {
    let ctx = context(common, server.pg.clone(), work_dir)?;
    let mut results = start_results(&ctx).await?;
    results.pg_server = server.setup.clone();
    let (json, md) = outputs(name, common);
    let only = &common.only;
    if !only.is_empty() {
        // Re-run some scenarios into an existing results file; the others are kept.
        match report::load_json(&json) {
            Ok(old) => results.keep_others(old, only),
            Err(e) if json.exists() => {
                anyhow::bail!("cannot read {} to merge into: {e:#}", json.display())
            }
            Err(_) => {}
        }
    }
    let clock = Instant::now();
    let wanted =
        |s: &str| (name == "all" && (only.is_empty() || only.iter().any(|o| o == s))) || name == s;
    let stamp = format!(
        "{}, gateway binary built {}, HEAD {}",
        results.started_at, results.gateway_built, results.git
    );

    if wanted("ingest-pg") {
        section("ingest-pg: PostgreSQL durable ingest vs the pgbench ceiling");
        let out = ingest::pg(&ctx).await;
        record(&mut results, "ingest-pg", &stamp, out, |r, v| {
            r.ingest_pg = Some(v)
        });
        finish(&mut results, clock, &json, None)?;
    }
    if wanted("ingest-sqlite") {
        section("ingest-sqlite: SQLite durable ingest vs a plain insert loop");
        let out = ingest::sqlite(&ctx).await;
        record(&mut results, "ingest-sqlite", &stamp, out, |r, v| {
            r.ingest_sqlite = Some(v)
        });
        finish(&mut results, clock, &json, None)?;
    }
    if wanted("delivery") {
        section("delivery: draining a backlog to the sink, clean, 1 in 10 failing, and in per-key order");
        let out = delivery::run(&ctx).await;
        record(&mut results, "delivery", &stamp, out, |r, v| {
            r.delivery = Some(v)
        });
        finish(&mut results, clock, &json, None)?;
    }
    if wanted("sustained") {
        section("sustained: all-in-one ingest + delivery at stepped rates, bounded lag");
        let rates = match &cli.command {
            Cmd::Sustained { rates: Some(r), .. } => r.clone(),
            _ => (1..=12).map(|k| f64::from(k) * 1000.0).collect(),
        };
        let out = sustained::run(&ctx, &rates).await;
        record(&mut results, "sustained", &stamp, out, |r, v| {
            r.sustained = Some(v)
        });
        finish(&mut results, clock, &json, None)?;
    }
    if wanted("e2e") {
        section("e2e: ingest 2xx to delivery (PostgreSQL, role all)");
        let given = match &cli.command {
            Cmd::E2e { max_rate, .. } => max_rate.map(|r| scenarios::IngestRun {
                max: loadgen::LoadReport {
                    throughput: r,
                    ..Default::default()
                },
                ..Default::default()
            }),
            _ => None,
        };
        let max = given.or_else(|| results.ingest_pg.as_ref().map(|p| p.gateway.clone()));
        let sustained = results.sustained.as_ref().and_then(|s| s.best_bounded_rate);
        let out = e2e::run(&ctx, max.as_ref(), sustained).await;
        record(&mut results, "e2e", &stamp, out, |r, v| r.e2e = Some(v));
        finish(&mut results, clock, &json, None)?;
    }
    if wanted("backlog") {
        section("backlog: ingest and claim latency with events already stored");
        let sizes = match &cli.command {
            Cmd::Backlog { sizes: Some(s), .. } => s.clone(),
            _ if ctx.quick => vec![0, 100_000, 1_000_000],
            _ => vec![0, 1_000_000, 10_000_000],
        };
        let out = backlog::run(&ctx, &sizes).await;
        record(&mut results, "backlog", &stamp, out, |r, v| {
            r.backlog = Some(v)
        });
        finish(&mut results, clock, &json, None)?;
    }
    if wanted("signatures") {
        section("signatures: ingest with Ed25519 vs HMAC signatures, and verification alone");
        let baseline = common
            .baseline_hookgate
            .clone()
            .map(|bin| signatures::Baseline {
                bin,
                label: common.baseline_label.clone(),
            });
        let (stores, rounds, requests) = (
            &common.signature_stores,
            common.signature_rounds,
            common.signature_requests,
        );
        let out = signatures::run(&ctx, stores, baseline.as_ref(), rounds, requests).await;
        record(&mut results, "signatures", &stamp, out, |r, v| {
            r.signatures = Some(v)
        });
        finish(&mut results, clock, &json, None)?;
    }
    if wanted("routes") {
        section("routes: ingest with ten filtered routes vs one plain destination");
        let (stores, rounds, requests) = (
            &common.route_stores,
            common.route_rounds,
            common.route_requests,
        );
        let out = routes::run(&ctx, stores, rounds, requests).await;
        record(&mut results, "routes", &stamp, out, |r, v| {
            r.routes = Some(v)
        });
        finish(&mut results, clock, &json, None)?;
    }
    if wanted("quarantine-flood") {
        section("quarantine-flood: valid ingest under a flood of badly signed requests");
        let sizes = quarantine_flood::Sizes {
            flood_rate: common.flood_rate,
            rounds: common.flood_rounds.unwrap_or(if ctx.quick { 2 } else { 6 }),
            seconds: common
                .flood_seconds
                .unwrap_or(if ctx.quick { 3 } else { 10 }),
        };
        let out = quarantine_flood::run(&ctx, &common.flood_stores, sizes).await;
        record(&mut results, "quarantine-flood", &stamp, out, |r, v| {
            r.quarantine_flood = Some(v)
        });
        finish(&mut results, clock, &json, None)?;
    }
    if wanted("topology") {
        section("topology: 2 api + 2 worker vs 1 + 1 vs all-in-one on one PostgreSQL");
        let sizes = topology::Sizes {
            rounds: common
                .topology_rounds
                .unwrap_or(if ctx.quick { 1 } else { 3 }),
            seconds: common
                .topology_seconds
                .unwrap_or(if ctx.quick { 3 } else { 6 }),
            rate: common.topology_rate,
        };
        let out = topology::run(&ctx, sizes).await;
        record(&mut results, "topology", &stamp, out, |r, v| {
            r.topology = Some(v)
        });
        finish(&mut results, clock, &json, None)?;
    }
    if wanted("brokers") {
        section("brokers: hand-off to NATS JetStream and RabbitMQ vs the plain publish loop");
        let out = brokers::run(&ctx).await;
        record(&mut results, "brokers", &stamp, out, |r, v| {
            r.brokers = Some(v)
        });
        finish(&mut results, clock, &json, None)?;
    }
    if wanted("partitions") {
        section("partitions: time-partitioned vs unpartitioned PostgreSQL layout");
        let out = partitions::run(&ctx, common.events).await;
        record(&mut results, "partitions", &stamp, out, |r, v| {
            r.partitions = Some(v)
        });
        finish(&mut results, clock, &json, None)?;
    }
    if wanted("partitions-gateway") {
        section(
            "partitions-gateway: ingest through this build against one from before partitioning",
        );
        match &common.baseline_hookgate {
            Some(bin) => {
                let baseline = signatures::Baseline {
                    bin: bin.clone(),
                    label: common.baseline_label.clone(),
                };
                let out = partitions::through_gateway::run(&ctx, &baseline).await;
                record(&mut results, "partitions-gateway", &stamp, out, |r, v| {
                    r.partitions_gateway = Some(v)
                });
            }
            None => println!("  skipped: it needs --baseline-hookgate (a build from b66f21d)"),
        }
    }
    finish(&mut results, clock, &json, md.as_ref())?;
    println!("\n{}", markdown::render(&results));
    println!("results: {}", json.display());
    if let Some(md) = md {
        println!("table:   {}", md.display());
    }
    if !results.errors.is_empty() {
        anyhow::bail!("{} scenario(s) failed (see above)", results.errors.len());
    }
    Ok(())
}

fn context(c: &Common, pg: pg::PgServer, work_dir: PathBuf) -> anyhow::Result<Ctx> {
    let bin = c.hookgate.clone().unwrap_or_else(gateway::default_bin);
    anyhow::ensure!(
        bin.exists(),
        "no gateway binary at {} (build it: cargo build --release)",
        bin.display()
    );
    Ok(Ctx {
        quick: c.quick,
        pg,
        gw: GatewayOpts {
            bin: std::fs::canonicalize(&bin)?,
            rust_log: c.rust_log.clone(),
            pool: c.pool,
            worker_concurrency: c.worker_concurrency,
            max_in_flight: c.max_in_flight,
            work_dir,
        },
        body_size: c.body_size,
        concurrency: c.concurrency,
        rate_connections: c.rate_connections,
        seconds: c.seconds.unwrap_or(if c.quick { 5 } else { 30 }),
    })
}

async fn start_results(ctx: &Ctx) -> anyhow::Result<Results> {
    ctx.pg
        .drop_stale()
        .await
        .context("PostgreSQL must be reachable (see --pg)")?;
    let version = ctx.pg.setting("server_version").await.unwrap_or_default();
    Ok(Results {
        started_at: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
        quick: ctx.quick,
        git: report::git_describe(),
        machine: report::machine(version),
        gateway_built: std::fs::metadata(&ctx.gw.bin)
            .and_then(|m| m.modified())
            .map(|t| {
                chrono::DateTime::<chrono::Utc>::from(t)
                    .format("%Y-%m-%d %H:%M UTC")
                    .to_string()
            })
            .unwrap_or_default(),
        gateway: Some(ctx.gw.clone()),
        concurrency: ctx.concurrency,
        body_size: ctx.body_size,
        ..Default::default()
    })
}

fn outputs(name: &str, c: &Common) -> (PathBuf, Option<PathBuf>) {
    let results = PathBuf::from("bench/results");
    let json = c.json.clone().unwrap_or_else(|| match (name, c.quick) {
        ("all", false) => results.join("latest.json"),
        ("all", true) => results.join("quick.json"),
        (n, _) => results.join(format!("{n}.json")),
    });
    let md = c.markdown.clone().or_else(|| match (name, c.quick) {
        ("all", false) => Some(PathBuf::from("bench/RESULTS.md")),
        ("all", true) => Some(results.join("quick.md")),
        _ => None,
    });
    (json, md)
}

fn section(title: &str) {
    println!("\n== {title}");
}

fn record<T>(
    results: &mut Results,
    name: &str,
    stamp: &str,
    outcome: anyhow::Result<T>,
    put: impl FnOnce(&mut Results, T),
) {
    results
        .scenario_runs
        .insert(name.to_owned(), stamp.to_owned());
    match outcome {
        Ok(v) => put(results, v),
        Err(e) => {
            eprintln!("  {name} FAILED: {e:#}");
            results.errors.push(format!("{name}: {e:#}"));
        }
    }
}

fn finish(
    results: &mut Results,
    clock: Instant,
    json: &std::path::Path,
    md: Option<&PathBuf>,
) -> anyhow::Result<()> {
    results.wall_seconds = clock.elapsed().as_secs_f64();
    results.finished_at = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string();
    report::save_json(results, json)?;
    if let Some(md) = md {
        report::write_markdown(results, md)?;
    }
    Ok(())
}
