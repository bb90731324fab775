//! Sustained throughput: one all-in-one gateway (role `all`) ingests at a fixed rate and
//! delivers to the sink. Each step runs one rate, sampling every second the delivery lag (the
//! age of the oldest due pending job). A rate is sustained when the lag stays bounded: under
//! 5 s at the end and over the last half, and not trending up there. The rate steps up until
//! a step is not sustained, then one step half-way back refines the answer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Ctx;
use crate::gateway::{Gateway, GwConfig, Role};
use crate::loadgen::{self, Ids, LoadReport, Mode};
use crate::pg;
use crate::sink::Sink;
use crate::stats::slope;

/// Lag bound, seconds.
const MAX_LAG: f64 = 5.0;
/// Largest lag slope over the last half that still counts as flat, seconds per second.
const MAX_SLOPE: f64 = 0.02;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Step {
    pub target_rate: f64,
    pub ingest: LoadReport,
    /// (seconds since the step began, lag in seconds), one a second.
    pub lag: Vec<(f64, f64)>,
    pub final_lag_s: f64,
    pub max_lag_last_half_s: f64,
    pub slope_last_half: f64,
    /// The gateway kept up (2xx per second >= 98% of the rate) and the lag stayed bounded.
    pub bounded: bool,
    /// How long the leftover backlog took to drain after the step.
    pub drain_s: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Sustained {
    pub step_seconds: u64,
    pub steps: Vec<Step>,
    pub best_bounded_rate: Option<f64>,
    pub peak_rss_mb: f64,
}

pub async fn run(ctx: &Ctx, rates: &[f64]) -> anyhow::Result<Sustained> {
    let db = ctx.pg.create_db("sustained").await?;
    let r = steps(ctx, &db, rates).await;
    ctx.pg.drop_db(&db).await;
    r
}

async fn steps(ctx: &Ctx, db: &str, rates: &[f64]) -> anyhow::Result<Sustained> {
    let sink = Sink::start("127.0.0.1:0").await?;
    let cfg = GwConfig::new(ctx.pg.url(db), sink.url());
    let gw = Gateway::start(&ctx.gw, &cfg, Role::All, "sustained").await?;
    let pool = ctx.pg.pool(db, 2).await?;
    let step_len = ctx.secs(60, 10);
    let mut out = Sustained {
        step_seconds: step_len.as_secs(),
        ..Default::default()
    };
    let mut first_unbounded = None;
    for &rate in rates {
        let step = one_step(ctx, &gw, &pool, rate, step_len).await?;
        sink.state.reset();
        let (bounded, drained) = (step.bounded, step.drain_s.is_some());
        out.steps.push(step);
        if bounded {
            out.best_bounded_rate = Some(rate);
        } else {
            first_unbounded = drained.then_some(rate);
        }
        if !bounded || !drained {
            break;
        }
    }
    // One more step half-way between the last bounded rate and the first unbounded one.
    if let Some(high) = first_unbounded {
        let low = out.best_bounded_rate.unwrap_or(0.0);
        let mid = ((low + high) / 2.0 / 250.0).round() * 250.0;
        if mid > low && mid < high {
            let step = one_step(ctx, &gw, &pool, mid, step_len).await?;
            sink.state.reset();
            if step.bounded {
                out.best_bounded_rate = Some(mid);
            }
            out.steps.push(step);
        }
    }
    out.peak_rss_mb = gw.peak_rss_mb().unwrap_or(0.0);
    gw.stop().await?;
    pool.close().await;
    println!(
        "  => highest rate with bounded lag: {}",
        out.best_bounded_rate
            .map_or("none".to_owned(), |r| format!("{r:.0} events/s"))
    );
    Ok(out)
}

/// A step is sustained when the gateway kept up with its rate and the delivery lag stayed
/// under `MAX_LAG` without trending up (a lag that stays tiny may wobble).
fn is_bounded(
    ingest: &LoadReport,
    final_lag_s: f64,
    max_lag_last_half_s: f64,
    slope_last_half: f64,
) -> bool {
    ingest.kept_up()
        && final_lag_s < MAX_LAG
        && max_lag_last_half_s < MAX_LAG
        && (slope_last_half < MAX_SLOPE || max_lag_last_half_s < 0.5)
}

async fn one_step(
    ctx: &Ctx,
    gw: &Gateway,
    pool: &sqlx::PgPool,
    rate: f64,
    len: Duration,
) -> anyhow::Result<Step> {
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (pool, stop) = (pool.clone(), stop.clone());
        tokio::spawn(async move {
            let begin = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut lag = Vec::new();
            loop {
                tick.tick().await;
                if stop.load(Ordering::Relaxed) {
                    return lag;
                }
                let l = pg::delivery_lag(&pool).await.unwrap_or(f64::NAN);
                lag.push((begin.elapsed().as_secs_f64(), l));
            }
        })
    };
    let mode = Mode::Rate {
        per_sec: rate,
        connections: ctx.rate_connections,
    };
    let ingest = loadgen::run(ctx.spec(gw, mode, len, Ids::fresh()))
        .await
        .report;
    stop.store(true, Ordering::Relaxed);
    let lag = sampler.await?;
    let final_lag_s = pg::delivery_lag(pool).await?;

    let half = len.as_secs_f64() / 2.0;
    let (xs, ys): (Vec<f64>, Vec<f64>) = lag.iter().filter(|(t, _)| *t >= half).copied().unzip();
    let max_lag_last_half_s = ys.iter().copied().fold(final_lag_s, f64::max);
    let slope_last_half = slope(&xs, &ys);
    let bounded = is_bounded(&ingest, final_lag_s, max_lag_last_half_s, slope_last_half);

    // Let the backlog drain before the next step.
    let clock = Instant::now();
    let mut drain_s = None;
    while clock.elapsed() < Duration::from_secs(60) {
        if pg::count_jobs(pool, "pending").await? == 0
            && pg::count_jobs(pool, "in_progress").await? == 0
        {
            drain_s = Some(clock.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "    step {rate:.0}/s: {} | lag end {final_lag_s:.2} s, max (last half) {max_lag_last_half_s:.2} s, slope {slope_last_half:+.3} s/s => {}",
        ingest.line(),
        if bounded { "bounded" } else { "NOT bounded" }
    );
    Ok(Step {
        target_rate: rate,
        ingest,
        lag,
        final_lag_s,
        max_lag_last_half_s,
        slope_last_half,
        bounded,
        drain_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rate: f64, answered_per_s: f64) -> LoadReport {
        LoadReport {
            target_rate: Some(rate),
            throughput: answered_per_s,
            ..Default::default()
        }
    }

    #[test]
    fn a_step_whose_ingest_stretched_is_not_bounded_even_with_no_lag() {
        assert!(is_bounded(&at(4_000.0, 3_999.0), 0.0, 0.0, 0.0));
        // Every request answered 2xx, but the run stretched: 4,393/s against 5,000/s.
        assert!(!is_bounded(&at(5_000.0, 4_393.0), 0.0, 0.0, 0.0));
    }

    #[test]
    fn a_growing_or_long_lag_is_not_bounded() {
        let on_time = at(4_000.0, 4_000.0);
        assert!(!is_bounded(&on_time, 1.0, 4.0, 0.134));
        assert!(!is_bounded(&on_time, 6.0, 6.0, 0.0));
        assert!(is_bounded(&on_time, 0.3, 0.4, 0.1), "a tiny lag may wobble");
    }
}
