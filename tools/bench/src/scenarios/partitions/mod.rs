//! Time partitions (docs/decisions/postgres-time-partitions.md) against the unpartitioned
//! layout they replaced, side by side in one run, at the SQL level: each layout's own ingest
//! statement and retention, on databases migrated to each layout by the repository's
//! migrations (the old layout: every migration before `20261209000001`).
//!
//! 1. Ingest: each layout's group-commit statement (plain inserts, the fast path) with the
//!    same batches, on two fresh databases, in alternated segments.
//! 2. Retention of one day of `--events` stored over ten days (one succeeded job and one
//!    attempt per event): the old batched `DELETE` (retention.batch rows a statement, foreign
//!    keys cascading) against `PgStore::drop_expired_partitions` and
//!    `PgStore::forget_expired_keys`, the gateway's own code; the time and the WAL it writes,
//!    then the next day again while an insert loop runs at a fixed rate (its per-statement
//!    latency during the removal against the same loop just before).
//! 3. Migration: the old-layout database, still holding its other days, migrated by
//!    `hookgate migrate` (migration `20261209000001`, one transaction): seconds per million
//!    events.

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPool;
use uuid::Uuid;

use super::Ctx;
use crate::gateway::{self, render_toml, GwConfig};
use crate::stats::{LatencySummary, Samples};

/// Events per group-commit batch: the gateway at concurrency 64 with its two ingest writers
/// taking turns commits about half the requests in flight at once.
const BATCH: usize = 32;
/// Connections inserting at once: the gateway's `server.ingest_writers` default.
const WRITERS: usize = 2;
/// `retention.batch`'s default: rows a retention statement deletes.
const RETENTION_BATCH: i64 = 1000;
/// Days of stored events; retention removes the oldest (then the next, under load).
const DAYS: u64 = 10;
/// The fixed-rate insert loop beside a removal: each writer sends a batch this often.
const LOOP_EVERY: Duration = Duration::from_millis(25);
/// The loop alone before a removal, as the baseline.
const LOOP_BASELINE: Duration = Duration::from_secs(10);
/// A removal's window is at least this long from its start (a drop takes milliseconds).
const MIN_WINDOW: Duration = Duration::from_secs(2);
/// The migration under test.
const PARTITION_MIGRATION: i64 = 20261209000001;

/// Group commit's statement before partitioning (commit b66f21d,
/// src/store/postgres/ingest.rs, fast path): events with their UNIQUE key, then their jobs.
const OLD_INSERT: &str = "\
    WITH created AS ( \
        INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
            content_type, headers, body, verified_scheme, verified_secret_index, route_digest) \
        SELECT id, tenant, source, pid, etype, rat, ctype, h::jsonb, body, scheme, idx, rd \
        FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], \
            $6::timestamptz[], $7::text[], $8::text[], $9::bytea[], $10::text[], $11::int4[], \
            $18::int8[]) \
            AS t(id, tenant, source, pid, etype, rat, ctype, h, body, scheme, idx, rd) \
         RETURNING id \
    ), queued AS ( \
        INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
            locked_until, claim_token, created_at, updated_at, ordering_key, ordering_hold) \
        SELECT j.id, j.event_id, j.destination, \
            CASE WHEN j.token IS NULL THEN 'pending' ELSE 'in_progress' END, \
            CASE WHEN j.token IS NULL THEN 0 ELSE 1 END, j.due, j.lease, j.token, j.t, j.t, \
            j.okey, j.ohold \
        FROM UNNEST($12::uuid[], $13::uuid[], $14::text[], $15::timestamptz[], \
            $16::uuid[], $17::timestamptz[], $19::timestamptz[], $20::text[], $21::bool[]) \
            AS j(id, event_id, destination, t, token, lease, due, okey, ohold) \
        WHERE j.event_id IN (SELECT id FROM created) \
        RETURNING claim_token IS NULL AS queued \
    ) \
    SELECT c.id, EXISTS (SELECT 1 FROM queued WHERE queued) FROM created c";

/// Retention before partitioning (b66f21d, src/store/retention.rs): a batch of the oldest
/// settled events, their jobs and attempts by the foreign keys' ON DELETE CASCADE.
const OLD_DELETE: &str = "\
    DELETE FROM events WHERE id IN (SELECT e.id FROM events e \
     WHERE e.received_at < $1 AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.event_id = e.id \
     AND j.status IN ('pending', 'in_progress')) ORDER BY e.received_at LIMIT $2)";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// Migrations up to 20261208000001: plain tables, foreign keys, batched deletes.
    #[default]
    Unpartitioned,
    /// Every migration: daily partitions, `event_keys`, partition drops.
    Partitioned,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::Unpartitioned => "unpartitioned",
            Layout::Partitioned => "partitioned",
        }
    }

    fn insert_sql(self) -> &'static str {
        match self {
            Layout::Unpartitioned => OLD_INSERT,
            Layout::Partitioned => hookgate::store::INSERT_BATCH_FAST_SQL,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct IngestSide {
    pub layout: Layout,
    pub events: u64,
    pub seconds: f64,
    pub events_per_s: f64,
    /// Events/s of each of its segments, in round order.
    pub per_round: Vec<f64>,
    pub statement: LatencySummary,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct IngestCompare {
    pub batch: usize,
    pub writers: usize,
    pub segment_seconds: u64,
    pub rounds: usize,
    pub old: IngestSide,
    pub new: IngestSide,
    /// Partitioned / unpartitioned events/s, pooled over the rounds.
    pub ratio: f64,
    pub ratio_per_round: Vec<f64>,
}

/// One removal of a day's events, jobs and attempts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Removal {
    pub events_removed: u64,
    pub seconds: f64,
    pub wal_bytes: i64,
    /// Statements it took (batched deletes; for partitions, the key batches).
    pub statements: u64,
    /// The longest batched delete (unpartitioned).
    pub slowest_statement_ms: f64,
    /// Partitioned: the partition drop alone (events, jobs, attempts partitions) and the
    /// dedupe keys' batched delete alone.
    pub drop_seconds: f64,
    pub drop_wal_bytes: i64,
    pub keys_seconds: f64,
    pub keys_wal_bytes: i64,
    pub partitions_dropped: u64,
    pub partitions_held: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RetentionSide {
    pub layout: Layout,
    pub stored_events: u64,
    pub seed_seconds: f64,
    pub db_size_mb: f64,
    /// The oldest day, nothing else running.
    pub alone: Removal,
    /// The next day, while the insert loop runs.
    pub under_load: Removal,
    /// The loop's statement latency in the `LOOP_BASELINE` before the removal.
    pub loop_baseline: LatencySummary,
    /// The loop's statements that overlapped the removal (its window at least `MIN_WINDOW`).
    pub loop_during: LatencySummary,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Migration {
    pub events: u64,
    pub jobs: u64,
    pub attempts: u64,
    pub db_size_mb: f64,
    pub seconds: f64,
    pub wal_bytes: i64,
    pub seconds_per_million_events: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Partitions {
    pub method: String,
    pub days: u64,
    pub events_per_day: u64,
    pub body_bytes: usize,
    pub retention_batch: i64,
    pub loop_events_per_s: f64,
    pub ingest: IngestCompare,
    pub retention: Vec<RetentionSide>,
    pub migration: Option<Migration>,
}

pub async fn run(ctx: &Ctx, events: Option<u64>) -> anyhow::Result<Partitions> {
    let stored = events.unwrap_or(if ctx.quick { 200_000 } else { 2_000_000 });
    let per_day = (stored / DAYS).max(1);
    let mut out = Partitions {
        method: "SQL level: each layout's own statements, databases migrated by the \
                 repository's migrations (old layout: all before 20261209000001)"
            .into(),
        days: DAYS,
        events_per_day: per_day,
        body_bytes: ctx.body_size,
        retention_batch: RETENTION_BATCH,
        loop_events_per_s: (WRITERS * BATCH) as f64 / LOOP_EVERY.as_secs_f64(),
        ..Default::default()
    };
    out.ingest = ingest(ctx).await?;
    for layout in [Layout::Unpartitioned, Layout::Partitioned] {
        let db = ctx.pg.create_db(&format!("part_{}", layout.name())).await?;
        let r = retention(ctx, &db, layout, per_day, &mut out).await;
        ctx.pg.drop_db(&db).await;
        out.retention.push(r?);
    }
    Ok(out)
}

/// A database at `layout`. The partitioned one gets the partitions a gateway running
/// through those days would have made: one per UTC day from `first_day` to four days
/// ahead, and below them one from MINVALUE (the migration's first partition, empty).
async fn prepare(
    ctx: &Ctx,
    db: &str,
    layout: Layout,
    first_day: DateTime<Utc>,
) -> anyhow::Result<PgPool> {
    let pool = ctx.pg.pool(db, (WRITERS + 2) as u32).await?;
    let dir = Path::new("migrations/postgres");
    let mut migrator = sqlx::migrate::Migrator::new(dir)
        .await
        .with_context(|| format!("reading {} (run from the repository root)", dir.display()))?;
    if layout == Layout::Unpartitioned {
        let before: Vec<_> = migrator
            .migrations
            .iter()
            .filter(|m| m.version < PARTITION_MIGRATION)
            .cloned()
            .collect();
        migrator.migrations = Cow::Owned(before);
    }
    migrator.run(&pool).await?;
    if layout == Layout::Partitioned {
        let mut sql =
            String::from("DROP TABLE events_legacy, jobs_legacy, delivery_attempts_legacy;\n");
        let first = first_day.timestamp_millis();
        let until = (day_start(Utc::now()) + chrono::Duration::days(5)).timestamp_millis();
        for table in ["events", "jobs", "delivery_attempts"] {
            sql += &format!(
                "CREATE TABLE {table}_first PARTITION OF {table} \
                 FOR VALUES FROM (MINVALUE) TO ('{}');\n",
                bound(first)
            );
            let mut from = first;
            while from < until {
                let to = from + 86_400_000;
                let at = DateTime::<Utc>::from_timestamp_millis(from).unwrap_or_default();
                sql += &format!(
                    "CREATE TABLE {table}_p{} PARTITION OF {table} \
                     FOR VALUES FROM ('{}') TO ('{}');\n",
                    at.format("%Y%m%d%H%M"),
                    bound(from),
                    bound(to)
                );
                from = to;
            }
        }
        sqlx::raw_sql(&sql).execute(&pool).await?;
    }
    Ok(pool)
}

fn bound(millis: i64) -> Uuid {
    Uuid::from_u128((millis.max(0) as u128) << 80)
}

fn day_start(t: DateTime<Utc>) -> DateTime<Utc> {
    t.date_naive()
        .and_hms_opt(0, 0, 0)
        .unwrap_or_default()
        .and_utc()
}

/// The first stored day: `DAYS` days ending at yesterday's start.
fn first_day() -> DateTime<Utc> {
    day_start(Utc::now()) - chrono::Duration::days(DAYS as i64 + 1)
}

mod load;
mod removal;
mod table;
pub mod through_gateway;

use load::ingest;
use removal::retention;
