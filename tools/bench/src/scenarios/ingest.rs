//! Durable ingest throughput: on PostgreSQL against the pgbench one-transaction-per-event
//! ceiling, and on SQLite against a plain in-process insert loop, each in the same run.

use serde::{Deserialize, Serialize};

use super::sqlite_loop::{self, Level, PlainLoop};
use super::{measure_ingest, Ctx, IngestRun};
use crate::gateway::{self, GwConfig};
use crate::pgbench::{self, PgbenchResult};

/// A destination nobody listens on: the ingest runs start no workers.
const NO_SINK: &str = "http://127.0.0.1:9/unused";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct IngestPg {
    pub synchronous_commit: String,
    pub gateway: IngestRun,
    pub pgbench: PgbenchResult,
    /// Why the ceiling is missing, when pgbench could not run at all.
    pub pgbench_error: Option<String>,
    /// gateway events/s at the fixed concurrency / pgbench's best tps (0 without pgbench).
    pub ratio: f64,
}

pub async fn pg(ctx: &Ctx) -> anyhow::Result<IngestPg> {
    let synchronous_commit = ctx.pg.setting("synchronous_commit").await?;
    println!("  PostgreSQL synchronous_commit = {synchronous_commit}");
    let db = ctx.pg.create_db("ingest").await?;
    let cfg = GwConfig::new(ctx.pg.url(&db), NO_SINK);
    let gw = measure_ingest(ctx, &cfg, "ingest-pg").await;
    ctx.pg.drop_db(&db).await;
    let gw = gw?;

    let db = ctx.pg.create_db("pgbench").await?;
    let url = ctx.pg.url(&db);
    let bench = async {
        gateway::migrate(&ctx.gw, &GwConfig::new(url.clone(), NO_SINK))?;
        let secs = ctx.secs(20, 3).as_secs();
        let (dir, body) = (ctx.gw.work_dir.clone(), ctx.body_size);
        // Leave connection slots for whatever else uses this server.
        let cap = ctx
            .pg
            .free_connections()
            .await?
            .saturating_sub(10)
            .clamp(1, 256);
        tokio::task::spawn_blocking(move || {
            pgbench::run(&url, &dir, &[8, 16, 32, 64], cap, secs, body)
        })
        .await?
    }
    .await;
    ctx.pg.drop_db(&db).await;
    // The gateway's figures are kept even when the ceiling could not be measured.
    let (pgbench, pgbench_error) = match bench {
        Ok(p) => (p, None),
        Err(e) => {
            eprintln!("  pgbench FAILED: {e:#}");
            (PgbenchResult::default(), Some(format!("{e:#}")))
        }
    };
    let ratio = if pgbench.best_tps > 0.0 {
        gw.max.throughput / pgbench.best_tps
    } else {
        0.0
    };
    println!(
        "  => hookgate {:.0} events/s / pgbench {:.0} tps ({} clients) = {ratio:.2}x",
        gw.max.throughput, pgbench.best_tps, pgbench.best_clients
    );
    Ok(IngestPg {
        synchronous_commit,
        gateway: gw,
        pgbench,
        pgbench_error,
        ratio,
    })
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct IngestSqlite {
    pub journal_mode: String,
    /// The gateway's default level (FULL): the fields below.
    pub synchronous: String,
    pub gateway: IngestRun,
    pub plain_loop: PlainLoop,
    /// gateway events/s at the fixed concurrency / plain loop events/s.
    pub ratio: f64,
    /// The same at synchronous = NORMAL, durable against a process crash only.
    pub normal: Option<SqliteLevel>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SqliteLevel {
    pub synchronous: String,
    pub gateway: IngestRun,
    pub plain_loop: PlainLoop,
    pub ratio: f64,
}

/// Both levels, each against a plain loop at the same level, on fresh files.
pub async fn sqlite(ctx: &Ctx) -> anyhow::Result<IngestSqlite> {
    std::fs::create_dir_all(&ctx.gw.work_dir)?;
    let (full, journal_mode) = sqlite_level(ctx, Level::Full).await?;
    let (normal, _) = sqlite_level(ctx, Level::Normal).await?;
    Ok(IngestSqlite {
        journal_mode,
        synchronous: full.synchronous,
        gateway: full.gateway,
        plain_loop: full.plain_loop,
        ratio: full.ratio,
        normal: Some(normal),
    })
}

/// One level: the gateway's ingest, then the plain loop; returns the journal mode too.
async fn sqlite_level(ctx: &Ctx, level: Level) -> anyhow::Result<(SqliteLevel, String)> {
    let dir = &ctx.gw.work_dir;
    let tag = level.config();
    let gw_name = format!("ingest-gateway-{tag}.db");
    let loop_name = format!("ingest-loop-{tag}.db");
    let (gw_db, loop_db) = (dir.join(&gw_name), dir.join(&loop_name));
    println!("  synchronous = {}", level.pragma());
    let mut cfg = GwConfig::new(ctx.sqlite_url(&gw_name), NO_SINK);
    cfg.sqlite_synchronous = Some(level.config());
    let result = async {
        let gw = measure_ingest(ctx, &cfg, &format!("ingest-sqlite-{tag}")).await?;
        let journal_mode = sqlite_loop::journal_mode(&gw_db).await?;
        gateway::migrate(&ctx.gw, &GwConfig::new(ctx.sqlite_url(&loop_name), NO_SINK))?;
        let plain = sqlite_loop::run(&loop_db, level, ctx.secs(20, 3), ctx.body_size).await?;
        println!(
            "    plain insert loop (1 event + 1 job per transaction, WAL, synchronous={}): {:.0} events/s, transaction p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms",
            level.pragma(),
            plain.events_per_s,
            plain.transaction.p50_ms,
            plain.transaction.p99_ms,
            plain.transaction.p999_ms
        );
        let ratio = gw.max.throughput / plain.events_per_s.max(1e-9);
        println!(
            "  => hookgate {:.0} events/s / plain loop {:.0} events/s = {ratio:.2}x",
            gw.max.throughput, plain.events_per_s
        );
        let run = SqliteLevel {
            synchronous: level.pragma().into(),
            gateway: gw,
            plain_loop: plain,
            ratio,
        };
        anyhow::Ok((run, journal_mode))
    }
    .await;
    for db in [&gw_db, &loop_db] {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
    }
    result
}
