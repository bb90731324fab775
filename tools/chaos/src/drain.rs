//! The drain after the faults stop: the harness waits (within `--drain-timeout`) until
//! neither database has a `pending` or `in_progress` job and, when the non-retrying
//! provider's source is reconciled, every event the fake provider API holds is stored, with
//! at least one listing made after the faults stopped (reconciliation ran after the last
//! outage).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::check;
use crate::provider_api::ApiState;
use crate::recovery;

pub struct DrainSpec<'a> {
    pub pg_url: &'a str,
    pub lite_db: &'a Path,
    pub timeout: Duration,
    pub provider_api: &'a ApiState,
    /// False in the checker's self-test (no `[sources.reconcile]`): nothing to wait for.
    pub reconciled: bool,
    /// When the load and the faults stopped, in seconds since the run's start.
    pub load_stopped_at: f64,
}

async fn unfinished_jobs(pg_url: &str, lite: &Path) -> anyhow::Result<(i64, i64)> {
    let pg = check::unfinished_pg(pg_url).await?;
    let lite = check::unfinished_sqlite(lite).await?;
    Ok((pg, lite))
}

/// Waits as above; what did not finish in time becomes a warning (the checker then reports
/// the events concerned as violations).
pub async fn drain(spec: &DrainSpec<'_>, warnings: &mut Vec<String>) {
    let (pg_url, lite_db, reconciled) = (spec.pg_url, spec.lite_db, spec.reconciled);
    let provider_api = spec.provider_api;
    let load_stopped_at = spec.load_stopped_at;
    let mut drain_deadline = Instant::now() + spec.timeout;
    let produced = provider_api.ids();
    let mut last = (-1, -1);
    let mut unstored = usize::MAX;
    let mut waited_for_lease = false;
    loop {
        let queues = unfinished_jobs(pg_url, lite_db).await;
        let recovered = if reconciled {
            let listed_since_stop = provider_api
                .counts()
                .last_call_at
                .is_some_and(|t| t > load_stopped_at);
            match recovery::unstored(pg_url, &produced).await {
                Ok(n) => unstored = n,
                Err(e) => eprintln!("chaos: drain poll failed (retrying): {e}"),
            }
            listed_since_stop && unstored == 0
        } else {
            true
        };
        match queues {
            Ok((0, 0)) if recovered => break,
            Ok(n) => last = n,
            Err(e) => eprintln!("chaos: drain poll failed (retrying): {e}"),
        }
        if Instant::now() > drain_deadline && !recovered && !waited_for_lease {
            // A run whose process died (or whose end could not be written) holds the source's
            // lease until it expires, within 50 s (docs/RECOVERY.md); recovery resumes
            // then. That is the gateway's documented bound, so the drain waits for it, once.
            if let Ok(Some(until)) = recovery::lease_until(pg_url).await {
                waited_for_lease = true;
                let left = (until - chrono::Utc::now()).to_std().unwrap_or_default();
                let extra = left + Duration::from_secs(15);
                warnings.push(format!(
                    "reconciliation had not caught up at the drain timeout ({} events not stored) and \
                     the source's lease was held until {until}: the drain waited {:.0}s more for it",
                    unstored,
                    extra.as_secs_f64()
                ));
                eprintln!("chaos: reconciliation lease held until {until}; waiting for it");
                drain_deadline = Instant::now() + extra;
            }
        }
        if Instant::now() > drain_deadline {
            if last != (0, 0) {
                warnings.push(format!(
                    "the queues did not drain within {}: {} PostgreSQL and {} SQLite jobs left",
                    humantime::format_duration(spec.timeout),
                    last.0.max(0),
                    last.1.max(0)
                ));
            }
            if !recovered {
                warnings.push(format!(
                    "reconciliation did not catch up within {}: {} of the non-retrying \
                     provider's events not stored{}",
                    humantime::format_duration(spec.timeout),
                    if unstored == usize::MAX {
                        "?".to_owned()
                    } else {
                        unstored.to_string()
                    },
                    if provider_api.counts().last_call_at <= Some(load_stopped_at) {
                        ", and no listing since the faults stopped"
                    } else {
                        ""
                    }
                ));
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
