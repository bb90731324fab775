//! Why a webhook was delivered more than once. At-least-once delivery repeats an attempt
//! the destination accepted only when its outcome was never recorded under its claim: the
//! process holding the job's lease was killed or paused before it recorded the outcome (or,
//! on PostgreSQL, could not write it while the database restarted or its connections were
//! cut), the lease expired, the reconciler put the job back (`lease_expired`), and it was
//! claimed again. So for every extra copy the sink accepted, the checker wants both halves
//! of that story:
//!
//! - the database: the copy's attempt has a `lease_expired` row and no `succeeded` one;
//! - the fault log: a kill -9 or pause of a process that could hold the lease (a worker for
//!   PostgreSQL, the all-in-one for SQLite; the very process, when it reported late and its
//!   `lease_lost` row names it) from the copy's arrival to one lease length later, or a
//!   pause that ended shortly before it arrived (the paused process sent its stale attempt
//!   on resuming). On PostgreSQL, a restart or cut connections in that window explain it
//!   too, as a separate count.
//!
//! One more story repeats an attempt without a lease expiring: the process sent it and was
//! paused before it read the answer; on resuming it finds the attempt's timeout run out,
//! records a `retry` under its claim, and the job goes out again. The checker wants that
//! attempt's `retry` row written by the paused process, and the pause to start from the
//! copy's arrival to one timeout later and to outlast the timeout.
//!
//! Any other extra copy is unexplained, and a violation.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::faults::FaultEvent;
use crate::procs::Kind;
use crate::sink::{Answered, Delivery};

/// A fault is noted just after it happens, a delivery when it arrives: allowance between
/// the two clocks' readings.
const SLACK_SECS: f64 = 0.5;
/// How long before an attempt a database fault may have cut the connection its outcome is
/// then written on (see `fits`).
const DATABASE_LOOKBACK_SECS: f64 = 15.0;

/// One `delivery_attempts` row of a job.
#[derive(Debug, Clone)]
pub struct AttemptRow {
    pub attempt: i64,
    pub worker_id: String,
    pub outcome: String,
}

/// Attempt rows by (event id, destination).
pub type Attempts = HashMap<(String, String), Vec<AttemptRow>>;

/// What the attribution reads besides the deliveries.
pub struct Context<'a> {
    pub attempts: &'a Attempts,
    pub faults: &'a [FaultEvent],
    /// The slot of every process started, by pid (a worker id holds its process's pid).
    pub slots_by_pid: &'a HashMap<u32, String>,
    /// Every slot's name and kind.
    pub slots: &'a [(String, Kind)],
    pub lease_secs: f64,
    /// The sink destination's per-attempt timeout.
    pub timeout_secs: f64,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct DuplicateFindings {
    /// Deliveries (an event to a destination) the sink accepted more than once.
    pub deliveries: u64,
    /// Accepted copies beyond the one the job's `succeeded` row records.
    pub extra: u64,
    /// Extra copies after a lease expired because of a kill or a pause, or after a pause
    /// kept the process from reading the answer in time, by fault and process
    /// (`kill -9 pg-worker-1`).
    pub after_process_fault: BTreeMap<String, u64>,
    /// Extra copies after a lease expired while PostgreSQL restarted or its connections
    /// were cut (the outcome could not be written), by fault.
    pub after_database_fault: BTreeMap<String, u64>,
    pub unexplained: Vec<String>,
}

impl DuplicateFindings {
    pub fn explained_by_process(&self) -> u64 {
        self.after_process_fault.values().sum()
    }

    pub fn explained_by_database(&self) -> u64 {
        self.after_database_fault.values().sum()
    }

    pub fn violations(&self) -> Vec<String> {
        if self.unexplained.is_empty() {
            return Vec::new();
        }
        let e: Vec<&str> = self
            .unexplained
            .iter()
            .take(3)
            .map(String::as_str)
            .collect();
        vec![format!(
            "duplicate deliveries no kill, pause or database fault explains: {} (e.g. {})",
            self.unexplained.len(),
            e.join("; ")
        )]
    }

    /// One line for the report.
    pub fn line(&self) -> String {
        let list = |m: &BTreeMap<String, u64>| {
            let v: Vec<String> = m.iter().map(|(k, n)| format!("{k} {n}")).collect();
            if v.is_empty() {
                String::new()
            } else {
                format!(" ({})", v.join(", "))
            }
        };
        format!(
            "{} extra copies of {} deliveries: {} explained by a kill/pause of the process holding it (its lease expired, or its answer timed out while paused){}, {} by a lease expiring while PostgreSQL was down or cut off{}, {} unexplained",
            self.extra,
            self.deliveries,
            self.explained_by_process(),
            list(&self.after_process_fault),
            self.explained_by_database(),
            list(&self.after_database_fault),
            self.unexplained.len()
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Postgres,
    Sqlite,
}

/// The store and destination a sink path belongs to.
fn job_of(path: &str) -> Option<(Store, &'static str)> {
    let (store, rest) = if let Some(rest) = path.strip_prefix("/postgres") {
        (Store::Postgres, rest)
    } else {
        (Store::Sqlite, path.strip_prefix("/sqlite")?)
    };
    match rest {
        "" => Some((store, "sink")),
        r if r == crate::ordered::PATH_SUFFIX => Some((store, "ordered")),
        _ => None,
    }
}

/// The pid in a worker id (`{hostname}-{pid}-{suffix}`).
fn pid_of(worker_id: &str) -> Option<u32> {
    worker_id.rsplit('-').nth(1)?.parse().ok()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum What {
    Kill,
    Pause,
    Database,
}

fn what(f: &FaultEvent) -> Option<What> {
    match f.kind.as_str() {
        k if k.starts_with("kill -9") => Some(What::Kill),
        k if k.starts_with("pause") => Some(What::Pause),
        "postgres restart" | "pg_terminate_backend" => Some(What::Database),
        _ => None,
    }
}

/// Whether fault `f` can have kept the attempt that arrived at `t` from being recorded
/// before its lease ran out.
fn fits(f: &FaultEvent, w: What, t: f64, lease: f64) -> bool {
    let (start, end) = (f.at_secs, f.ends_secs.unwrap_or(f.at_secs));
    match w {
        // Down (or dead) at some point from the arrival to a lease later.
        What::Kill => start <= t + lease && end >= t - SLACK_SECS,
        // As a kill, or up to `DATABASE_LOOKBACK_SECS` before the arrival: a connection the
        // cut closed is found dead only at its next use, and the outcome writer's held
        // connection may sit idle that long, so the write after this attempt fails and the
        // lease runs out.
        What::Database => start <= t + lease && end >= t - DATABASE_LOOKBACK_SECS,
        What::Pause => {
            let stopped_before_recording = start >= t - SLACK_SECS && start <= t + lease;
            let sent_on_resuming = t >= end - SLACK_SECS && t <= end + lease;
            stopped_before_recording || sent_on_resuming
        }
    }
}

/// Attributes every extra copy the sink accepted (see the module's documentation).
pub fn attribute(deliveries: &[Delivery], cx: &Context<'_>) -> DuplicateFindings {
    let mut copies: BTreeMap<(String, &str), (Store, Vec<&Delivery>)> = BTreeMap::new();
    for d in deliveries.iter().filter(|d| d.answered == Answered::Ok) {
        let (Some(id), Some((store, dest))) = (&d.webhook_id, job_of(&d.path)) else {
            continue; // the main checker reports these
        };
        let entry = copies
            .entry((id.clone(), dest))
            .or_insert((store, Vec::new()));
        entry.1.push(d);
    }
    let kind_of: HashMap<&str, Kind> = cx.slots.iter().map(|(n, k)| (n.as_str(), *k)).collect();
    let mut out = DuplicateFindings::default();
    let none = Vec::new();
    for ((event, dest), (store, mut ds)) in copies {
        if ds.len() < 2 {
            continue;
        }
        out.deliveries += 1;
        ds.sort_by(|a, b| a.at_secs.total_cmp(&b.at_secs));
        let rows = cx
            .attempts
            .get(&(event.clone(), dest.to_owned()))
            .unwrap_or(&none);
        let succeeded: HashSet<i64> = (rows.iter())
            .filter(|r| r.outcome == "succeeded")
            .map(|r| r.attempt)
            .collect();
        let kept = ds
            .iter()
            .position(|d| d.attempt.is_some_and(|a| succeeded.contains(&i64::from(a))))
            .unwrap_or(ds.len() - 1);
        for (i, d) in ds.iter().enumerate() {
            if i == kept {
                continue;
            }
            out.extra += 1;
            let at = format!(
                "{event} to {dest}: attempt {:?} at +{:.1}s",
                d.attempt, d.at_secs
            );
            match explain(store, d, rows, &succeeded, &kind_of, cx) {
                Ok((label, What::Database)) => {
                    *out.after_database_fault.entry(label).or_default() += 1
                }
                Ok((label, _)) => *out.after_process_fault.entry(label).or_default() += 1,
                Err(why) => out.unexplained.push(format!("{at}: {why}")),
            }
        }
    }
    out
}

/// The fault that explains an extra copy, as (label, what), or why none does.
fn explain(
    store: Store,
    d: &Delivery,
    rows: &[AttemptRow],
    succeeded: &HashSet<i64>,
    kind_of: &HashMap<&str, Kind>,
    cx: &Context<'_>,
) -> Result<(String, What), String> {
    let attempt = i64::from(d.attempt.ok_or("no hookgate-attempt header")?);
    let t = d.at_secs;
    if succeeded.contains(&attempt) {
        // A claim commits without waiting for its WAL flush (`PgStore::relaxed`): a crash of
        // PostgreSQL can lose it after its delivery went out, and the job is then claimed
        // again under the same attempt number, so two copies carry it.
        let crash = (cx.faults.iter()).find(|f| {
            store == Store::Postgres
                && f.kind == "postgres restart"
                && fits(f, What::Database, t, cx.lease_secs)
        });
        return match crash {
            Some(f) => Ok((f.kind.clone(), What::Database)),
            None => Err("the same attempt was accepted twice".into()),
        };
    }
    let of_attempt: Vec<&AttemptRow> = rows.iter().filter(|r| r.attempt == attempt).collect();
    if let Some(slot) = paused_past_its_timeout(&of_attempt, t, cx) {
        return Ok((format!("pause {slot}"), What::Pause));
    }
    if !of_attempt.iter().any(|r| r.outcome == "lease_expired") {
        let outcomes: Vec<&str> = of_attempt.iter().map(|r| r.outcome.as_str()).collect();
        return Err(format!(
            "its lease never expired (recorded: {})",
            if outcomes.is_empty() {
                "nothing".to_owned()
            } else {
                outcomes.join(", ")
            }
        ));
    }
    // The process that reported after losing the lease, when one did.
    let late: Option<&String> = (of_attempt.iter())
        .filter(|r| r.outcome == "lease_lost")
        .find_map(|r| pid_of(&r.worker_id).and_then(|p| cx.slots_by_pid.get(&p)));
    let holder_kind = match store {
        Store::Postgres => Kind::Worker,
        Store::Sqlite => Kind::AllInOne,
    };
    let could_hold = |slot: &str| match late {
        Some(l) => l == slot,
        None => kind_of.get(slot) == Some(&holder_kind),
    };
    let nearest = |ok: &dyn Fn(&FaultEvent, What) -> bool| {
        (cx.faults.iter())
            .filter_map(|f| what(f).map(|w| (f, w)))
            .filter(|&(f, w)| ok(f, w) && fits(f, w, t, cx.lease_secs))
            .min_by(|a, b| (a.0.at_secs - t).abs().total_cmp(&(b.0.at_secs - t).abs()))
    };
    let by_process =
        nearest(&|f, w| w != What::Database && f.slot.as_deref().is_some_and(could_hold));
    if let Some((f, w)) = by_process {
        let verb = if w == What::Kill { "kill -9" } else { "pause" };
        return Ok((format!("{verb} {}", f.slot.as_deref().unwrap_or("?")), w));
    }
    let by_database = nearest(&|_, w| w == What::Database && store == Store::Postgres);
    if let Some((f, w)) = by_database {
        return Ok((f.kind.clone(), w));
    }
    Err(format!(
        "its lease expired, but no kill or pause of {} and no database fault from +{:.1}s to +{:.1}s",
        late.map_or_else(|| format!("a {} process", holder_kind.label()), Clone::clone),
        t - SLACK_SECS,
        t + cx.lease_secs
    ))
}

/// The process that recorded a `retry` for the attempt that arrived at `t` when it was
/// paused from then until its answer had timed out (see the module's documentation).
fn paused_past_its_timeout<'a>(rows: &[&AttemptRow], t: f64, cx: &Context<'a>) -> Option<&'a str> {
    let timed_out_at = t + cx.timeout_secs;
    let paused = |slot: &str| {
        cx.faults.iter().any(|f| {
            what(f) == Some(What::Pause)
                && f.slot.as_deref() == Some(slot)
                && (t - SLACK_SECS..=timed_out_at).contains(&f.at_secs)
                && f.ends_secs
                    .is_some_and(|end| end >= timed_out_at - SLACK_SECS)
        })
    };
    (rows.iter())
        .filter(|r| r.outcome == "retry")
        .filter_map(|r| cx.slots_by_pid.get(&pid_of(&r.worker_id)?))
        .map(String::as_str)
        .find(|slot| paused(slot))
}

/// Every attempt row of the deliveries to the sink (not of the broker's `bus`).
const ATTEMPTS_SQL: &str =
    "SELECT CAST(j.event_id AS TEXT), j.destination, CAST(a.attempt AS BIGINT), \
     a.worker_id, a.outcome FROM delivery_attempts a JOIN jobs j ON j.id = a.job_id \
     WHERE j.destination <> 'bus'";

fn index(rows: Vec<(String, String, i64, String, String)>, into: &mut Attempts) {
    for (event, dest, attempt, worker_id, outcome) in rows {
        into.entry((event, dest)).or_default().push(AttemptRow {
            attempt,
            worker_id,
            outcome,
        });
    }
}

/// The attempt rows of both databases.
pub async fn read_attempts(pg_url: &str, lite: &std::path::Path) -> anyhow::Result<Attempts> {
    use sqlx::Connection as _;
    let mut out = Attempts::new();
    let mut pg = sqlx::PgConnection::connect(pg_url).await?;
    index(
        sqlx::query_as(ATTEMPTS_SQL).fetch_all(&mut pg).await?,
        &mut out,
    );
    let _ = pg.close().await;
    let opts = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(lite)
        .read_only(true);
    let mut sqlite = sqlx::SqliteConnection::connect_with(&opts).await?;
    index(
        sqlx::query_as(ATTEMPTS_SQL).fetch_all(&mut sqlite).await?,
        &mut out,
    );
    let _ = sqlite.close().await;
    Ok(out)
}

#[cfg(test)]
mod tests;
