//! Backlog scaling: ingest throughput, duplicate-ingest latency and claim latency with 0,
//! 1 million and 10 million events already stored (bulk SQL, not HTTP), to show the dedupe
//! and claim paths stay O(log n).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{stripe_only, Ctx};
use crate::gateway::{self, render_toml, Gateway, GwConfig, Role};
use crate::loadgen::{self, Ids, LoadReport, Mode};
use crate::pg::{self, Seed};
use crate::stats::{LatencySummary, Samples};

/// Pending jobs left for the claim measurement, and how many a claim asks for.
const CLAIM_POOL: i64 = 2_000;
const CLAIM_BATCH: i64 = 10;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Level {
    pub stored_events: u64,
    pub seed_seconds: f64,
    pub db_size_mb: f64,
    pub ingest: LoadReport,
    /// Re-sending already stored events: the dedupe path answers 200 `duplicate: true`.
    pub duplicates: LoadReport,
    pub claim_batch: i64,
    /// One `Store::claim_jobs` call each, with `CLAIM_POOL` pending jobs due.
    pub claim: LatencySummary,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Backlog {
    pub levels: Vec<Level>,
    /// Ingest throughput at the largest level over the empty one.
    pub ratio_largest_to_empty: f64,
}

pub async fn run(ctx: &Ctx, sizes: &[u64]) -> anyhow::Result<Backlog> {
    let db = ctx.pg.create_db("backlog").await?;
    let r = levels(ctx, &db, sizes).await;
    ctx.pg.drop_db(&db).await;
    r
}

async fn levels(ctx: &Ctx, db: &str, sizes: &[u64]) -> anyhow::Result<Backlog> {
    let cfg = GwConfig::new(ctx.pg.url(db), "http://127.0.0.1:9/unused");
    gateway::migrate(&ctx.gw, &cfg)?;
    let pool = ctx.pg.pool(db, 2).await?;
    let mut out = Backlog::default();
    let mut stored = 0;
    for &size in sizes {
        println!("    level: {size} stored events");
        let seed = Seed {
            body_size: 64,
            job_status: "succeeded",
        };
        let seed_seconds = if size > stored {
            pg::seed(&pool, stored, size, 1_000_000, seed).await?
        } else {
            0.0
        };
        stored = stored.max(size);
        let db_size_mb: f64 =
            sqlx::query_scalar::<_, i64>("SELECT pg_database_size(current_database())")
                .fetch_one(&pool)
                .await? as f64
                / 1_048_576.0;

        let gw = Gateway::start(&ctx.gw, &cfg, Role::Api, &format!("backlog-{size}")).await?;
        let mode = Mode::Concurrency(ctx.concurrency);
        let mut spec = ctx.spec(&gw, mode, ctx.secs(3, 1), Ids::fresh());
        spec.sources = stripe_only();
        let _ = loadgen::run(spec).await;
        let ids = Ids::fresh();
        let mut spec = ctx.spec(&gw, mode, ctx.secs(20, 5), ids);
        spec.sources = stripe_only();
        let ingest = loadgen::run(spec).await.report;
        println!("      ingest {}", ingest.line());
        let Ids::Fresh { offset } = ids else {
            unreachable!("fresh ids")
        };
        // Ids of the run just measured: its first `ok_2xx` requests at least were stored.
        let stored_ids = Ids::Existing {
            offset,
            count: ingest.ok_2xx.max(1),
        };
        let mut spec = ctx.spec(&gw, mode, ctx.secs(10, 3), stored_ids);
        spec.sources = stripe_only();
        let duplicates = loadgen::run(spec).await.report;
        println!("      duplicates {}", duplicates.line());
        gw.stop().await?;

        let claim = claim_latency(ctx, &cfg, &pool).await?;
        println!(
            "      claim of {CLAIM_BATCH}: p50 {:.2} ms, p99 {:.2} ms ({} claims)",
            claim.p50_ms, claim.p99_ms, claim.count
        );
        out.levels.push(Level {
            stored_events: size,
            seed_seconds,
            db_size_mb,
            ingest,
            duplicates,
            claim_batch: CLAIM_BATCH,
            claim,
        });
    }
    pool.close().await;
    if let (Some(first), Some(last)) = (out.levels.first(), out.levels.last()) {
        out.ratio_largest_to_empty = last.ingest.throughput / first.ingest.throughput.max(1e-9);
        println!(
            "  => ingest at {} stored / at {} stored = {:.2}x",
            last.stored_events, first.stored_events, out.ratio_largest_to_empty
        );
    }
    Ok(out)
}

/// Leaves the newest `CLAIM_POOL` pending jobs due, times `Store::claim_jobs` until they are
/// all claimed, then marks every job done so the next level starts clean.
async fn claim_latency(
    ctx: &Ctx,
    cfg: &GwConfig,
    pool: &sqlx::PgPool,
) -> anyhow::Result<LatencySummary> {
    sqlx::query(
        "UPDATE jobs SET status = 'succeeded' WHERE status = 'pending' AND id NOT IN \
         (SELECT id FROM jobs WHERE status = 'pending' ORDER BY next_attempt_at DESC LIMIT $1)",
    )
    .bind(CLAIM_POOL)
    .execute(pool)
    .await?;
    sqlx::raw_sql("VACUUM ANALYZE jobs").execute(pool).await?;
    let settings = hookgate::config::Settings::from_toml_str(&render_toml(&ctx.gw, cfg))?;
    let config = hookgate::config::GatewayConfig::from_settings(&settings)?;
    let store = hookgate::store::Store::connect(&config.database)?;
    store.ping().await?;
    let mut samples = Samples::default();
    loop {
        let now = chrono::Utc::now();
        let clock = Instant::now();
        let jobs = store
            .claim_jobs(
                "sink",
                CLAIM_BATCH,
                now,
                now + chrono::Duration::seconds(30),
            )
            .await?;
        if jobs.is_empty() {
            break;
        }
        samples.record(clock.elapsed());
        if samples.len() as i64 > CLAIM_POOL {
            break;
        }
    }
    store.close().await;
    // Literal statuses, so the plan can use the partial indexes.
    for sql in [
        "UPDATE jobs SET status = 'succeeded' WHERE status = 'pending'",
        "UPDATE jobs SET status = 'succeeded' WHERE status = 'in_progress'",
    ] {
        sqlx::query(sql).execute(pool).await?;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(samples.summary())
}
