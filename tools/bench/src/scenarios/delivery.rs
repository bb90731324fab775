//! Delivery throughput: a worker-only gateway drains a backlog of pending jobs (bulk-seeded
//! with SQL) to the sink; once with every delivery answered 200, once with one in ten first
//! attempts answered 500 and retried (`retry_schedule = ["1ms"]`, so retries are due at once),
//! and once with the same backlog in per-key order over `ORDERED_KEYS` keys (each key's jobs
//! one at a time, in ingest order), all answered 200, beside the clean unordered run.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Ctx;
use crate::gateway::{self, Gateway, GwConfig, Role};
use crate::pg::{self, Seed};
use crate::sink::Sink;

/// Keys of the ordered run: the jobs go round-robin over them, so each key's line is the
/// backlog over this many.
pub const ORDERED_KEYS: u64 = 1_000;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DeliveryRun {
    pub jobs: u64,
    /// Ordering keys the jobs are spread over (0: unordered).
    pub ordering_keys: u64,
    /// One in this many first attempts fails (0: none).
    pub fail_one_in: u64,
    /// From the worker's start to the sink's last 200.
    pub seconds: f64,
    /// Jobs delivered (answered 200) per second.
    pub jobs_per_s: f64,
    /// Every POST the sink answered, per second.
    pub attempts_per_s: f64,
    pub sink_200: u64,
    pub sink_500: u64,
    /// Distinct events answered 200, and 200s beyond the first for one event (redeliveries).
    pub distinct_delivered: u64,
    pub redelivered: u64,
    /// Jobs per status when the run ended.
    pub job_statuses: Vec<(String, i64)>,
    /// Jobs in `succeeded` when the run ended: all of them, or the run timed out.
    pub succeeded: i64,
    pub complete: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Delivery {
    pub backlog: u64,
    pub clean: DeliveryRun,
    pub failing: DeliveryRun,
    /// failing jobs/s over clean jobs/s.
    pub ratio_failing_to_clean: f64,
    /// The clean backlog in per-key order (`ORDERED_KEYS` keys); none in results from
    /// before it was measured.
    pub ordered: Option<DeliveryRun>,
    /// ordered jobs/s over clean (unordered) jobs/s; target at least 0.5.
    pub ratio_ordered_to_clean: f64,
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Delivery> {
    let backlog = if ctx.quick { 10_000 } else { 100_000 };
    let clean = variant(ctx, backlog, 0, 0).await?;
    let failing = variant(ctx, backlog, 10, 0).await?;
    let ordered = variant(ctx, backlog, 0, ORDERED_KEYS).await?;
    let ratio = failing.jobs_per_s / clean.jobs_per_s.max(1e-9);
    let ratio_ordered = ordered.jobs_per_s / clean.jobs_per_s.max(1e-9);
    println!("  => ordered over unordered: {ratio_ordered:.2}x (target at least 0.5x)");
    Ok(Delivery {
        backlog,
        clean,
        failing,
        ratio_failing_to_clean: ratio,
        ordered: Some(ordered),
        ratio_ordered_to_clean: ratio_ordered,
    })
}

async fn variant(ctx: &Ctx, jobs: u64, fail_one_in: u64, keys: u64) -> anyhow::Result<DeliveryRun> {
    let db = ctx.pg.create_db("delivery").await?;
    let r = drain(ctx, &db, jobs, fail_one_in, keys).await;
    ctx.pg.drop_db(&db).await;
    r
}

/// Puts the seeded jobs in per-key order: round-robin over `keys` keys, each key's line in
/// the order the jobs were seeded, as ingest would have numbered them.
async fn order_jobs(pool: &sqlx::PgPool, keys: u64) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE jobs j SET ordering_key = 'key-' || (o.rn % $1), ordering_seq = o.rn, \
            ordering_hold = true \
         FROM (SELECT id, row_number() OVER (ORDER BY id) AS rn FROM jobs) o WHERE j.id = o.id",
    )
    .bind(keys as i64)
    .execute(pool)
    .await?;
    sqlx::query("SELECT setval('jobs_ordering_seq', (SELECT max(ordering_seq) FROM jobs))")
        .execute(pool)
        .await?;
    sqlx::query("VACUUM ANALYZE jobs").execute(pool).await?;
    Ok(())
}

async fn drain(
    ctx: &Ctx,
    db: &str,
    jobs: u64,
    fail_one_in: u64,
    keys: u64,
) -> anyhow::Result<DeliveryRun> {
    let sink = Sink::start("127.0.0.1:0").await?;
    sink.state.set_fail_one_in(fail_one_in);
    let mut cfg = GwConfig::new(ctx.pg.url(db), sink.url());
    cfg.retry_schedule = vec!["1ms".into(), "1ms".into(), "1ms".into()];
    gateway::migrate(&ctx.gw, &cfg)?;
    let pool = ctx.pg.pool(db, 2).await?;
    let seed = Seed {
        body_size: ctx.body_size,
        job_status: "pending",
    };
    let took = pg::seed(&pool, 0, jobs, 100_000, seed).await?;
    println!("    seeded {jobs} pending jobs in {took:.1} s");
    if keys > 0 {
        order_jobs(&pool, keys).await?;
        println!("    ordered them over {keys} keys");
    }

    let gw = Gateway::start(&ctx.gw, &cfg, Role::Worker, "delivery").await?;
    let clock = Instant::now();
    let limit = Duration::from_secs(60 + jobs / 200);
    let mut last_ok_at = clock;
    let mut last_ok = 0;
    while clock.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let ok = sink.state.ok.load(Ordering::Relaxed);
        if ok != last_ok {
            (last_ok, last_ok_at) = (ok, Instant::now());
        }
        if ok >= jobs {
            break;
        }
    }
    // The outcome writes trail the last 200 by a moment.
    let mut succeeded = 0;
    for _ in 0..100 {
        succeeded = pg::count_jobs(&pool, "succeeded").await?;
        if succeeded as u64 >= jobs {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gw.stop().await?;
    let job_statuses: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM jobs GROUP BY status ORDER BY status")
            .fetch_all(&pool)
            .await?;
    pool.close().await;
    let mut seen = std::collections::HashSet::new();
    let mut redelivered = 0;
    for r in sink.state.take_receipts() {
        if r.status == 200 && !seen.insert(r.webhook_id) {
            redelivered += 1;
        }
    }
    let seconds = last_ok_at.duration_since(clock).as_secs_f64().max(1e-3);
    let sink_200 = sink.state.ok.load(Ordering::Relaxed);
    let sink_500 = sink.state.failed.load(Ordering::Relaxed);
    let run = DeliveryRun {
        jobs,
        ordering_keys: keys,
        fail_one_in,
        seconds,
        jobs_per_s: last_ok.min(jobs) as f64 / seconds,
        attempts_per_s: (sink_200 + sink_500) as f64 / seconds,
        sink_200,
        sink_500,
        distinct_delivered: seen.len() as u64,
        redelivered,
        job_statuses,
        succeeded,
        complete: succeeded as u64 >= jobs,
    };
    if !run.complete || redelivered > 0 {
        println!(
            "    note: {} distinct events answered 200, {redelivered} redelivered; jobs by status: {:?}",
            run.distinct_delivered, run.job_statuses
        );
    }
    println!(
        "  => {} jobs{}: {:.1} s, {:.0} deliveries/s ({:.0} attempts/s, {} answered 500), all succeeded: {}",
        jobs,
        match (fail_one_in, keys) {
            (0, 0) => String::new(),
            (0, k) => format!(" (in order over {k} keys)"),
            (f, _) => format!(" (1 in {f} first attempts fail)"),
        },
        run.seconds,
        run.jobs_per_s,
        run.attempts_per_s,
        sink_500,
        run.complete
    );
    Ok(run)
}
