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

/// The partitioned layout's statement (src/store/postgres/ingest.rs, fast path): the dedupe
/// keys first, then the events whose key it created, then their jobs.
const NEW_INSERT: &str = "\
    WITH keyed AS ( \
        INSERT INTO event_keys (source, provider_event_id, event_id, received_at) \
        SELECT source, pid, id, rat \
        FROM UNNEST($3::text[], $4::text[], $1::uuid[], $6::timestamptz[]) \
            AS k(source, pid, id, rat) \
         RETURNING event_id \
    ), created AS ( \
        INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
            content_type, headers, body, verified_scheme, verified_secret_index, route_digest) \
        SELECT id, tenant, source, pid, etype, rat, ctype, h::jsonb, body, scheme, idx, rd \
        FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], \
            $6::timestamptz[], $7::text[], $8::text[], $9::bytea[], $10::text[], $11::int4[], \
            $18::int8[]) \
            AS t(id, tenant, source, pid, etype, rat, ctype, h, body, scheme, idx, rd) \
        WHERE t.id IN (SELECT event_id FROM keyed) \
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
            Layout::Partitioned => NEW_INSERT,
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

// ---- 1. ingest ----

/// One batch of events, one pending job each, as the gateway binds them.
struct Batch {
    ids: Vec<Uuid>,
    tenants: Vec<&'static str>,
    sources: Vec<&'static str>,
    provider_ids: Vec<String>,
    types: Vec<Option<&'static str>>,
    received: Vec<DateTime<Utc>>,
    content_types: Vec<Option<&'static str>>,
    headers: Vec<&'static str>,
    bodies: Vec<Vec<u8>>,
    schemes: Vec<&'static str>,
    secret_indexes: Vec<i32>,
    job_ids: Vec<Uuid>,
    job_destinations: Vec<&'static str>,
    job_tokens: Vec<Option<Uuid>>,
    job_leases: Vec<Option<DateTime<Utc>>>,
    job_keys: Vec<Option<&'static str>>,
    job_holds: Vec<bool>,
    route_digests: Vec<Option<i64>>,
}

const HEADERS: &str = "[[\"content-type\",\"application/json\"],[\"user-agent\",\"Stripe/1.0 (+https://stripe.com/docs/webhooks)\"],[\"stripe-signature\",\"t=1765000000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd\"],[\"content-length\",\"512\"]]";

impl Batch {
    fn new(body_size: usize) -> Self {
        let now = Utc::now();
        let mut b = Batch {
            ids: Vec::with_capacity(BATCH),
            tenants: vec!["default"; BATCH],
            sources: vec!["stripe"; BATCH],
            provider_ids: Vec::with_capacity(BATCH),
            types: vec![Some("invoice.paid"); BATCH],
            received: vec![now; BATCH],
            content_types: vec![Some("application/json"); BATCH],
            headers: vec![HEADERS; BATCH],
            bodies: Vec::with_capacity(BATCH),
            schemes: vec!["stripe-v1"; BATCH],
            secret_indexes: vec![0; BATCH],
            job_ids: Vec::with_capacity(BATCH),
            job_destinations: vec!["sink"; BATCH],
            job_tokens: vec![None; BATCH],
            job_leases: vec![None; BATCH],
            job_keys: vec![None; BATCH],
            job_holds: vec![false; BATCH],
            route_digests: vec![Some(0x5eed); BATCH],
        };
        for _ in 0..BATCH {
            let event = hookgate::domain::EventId::generate();
            b.ids.push(event.as_uuid());
            b.job_ids
                .push(hookgate::domain::JobId::for_event(event).as_uuid());
            let pid = format!("evt_{:024x}", fastrand::u128(..) >> 32);
            let mut body = format!("{{\"id\":\"{pid}\",\"type\":\"invoice.paid\",\"pad\":\"");
            while body.len() + 2 < body_size {
                body.push('x');
            }
            body.push_str("\"}");
            b.bodies.push(body.into_bytes());
            b.provider_ids.push(pid);
        }
        b
    }

    async fn insert(&self, conn: &mut sqlx::PgConnection, sql: &str) -> anyhow::Result<()> {
        let rows: Vec<(Uuid, bool)> = sqlx::query_as(sql)
            .bind(&self.ids)
            .bind(&self.tenants)
            .bind(&self.sources)
            .bind(&self.provider_ids)
            .bind(&self.types)
            .bind(&self.received)
            .bind(&self.content_types)
            .bind(&self.headers)
            .bind(&self.bodies)
            .bind(&self.schemes)
            .bind(&self.secret_indexes)
            .bind(&self.job_ids)
            .bind(&self.ids)
            .bind(&self.job_destinations)
            .bind(&self.received)
            .bind(&self.job_tokens)
            .bind(&self.job_leases)
            .bind(&self.route_digests)
            .bind(&self.received)
            .bind(&self.job_keys)
            .bind(&self.job_holds)
            .fetch_all(conn)
            .await?;
        anyhow::ensure!(rows.len() == BATCH, "a batch stored {} events", rows.len());
        Ok(())
    }
}

/// Statement latencies of an insert loop, each with its start and end.
type Timed = Vec<(Instant, Instant)>;

/// `WRITERS` connections inserting batches of `layout`'s statement until `stop`: flat out,
/// or one batch every `every` per writer.
async fn insert_loop(
    pool: &PgPool,
    layout: Layout,
    body_size: usize,
    every: Option<Duration>,
    stop: Arc<tokio::sync::watch::Receiver<bool>>,
) -> anyhow::Result<Timed> {
    let mut tasks = Vec::new();
    for _ in 0..WRITERS {
        let pool = pool.clone();
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = pool.acquire().await?;
            let mut timed = Timed::new();
            let mut next = tokio::time::Instant::now();
            while !*stop.borrow() {
                let batch = Batch::new(body_size);
                if let Some(every) = every {
                    tokio::time::sleep_until(next).await;
                    next += every;
                }
                let start = Instant::now();
                batch.insert(&mut conn, layout.insert_sql()).await?;
                timed.push((start, Instant::now()));
            }
            Ok::<_, anyhow::Error>(timed)
        }));
    }
    let mut all = Timed::new();
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(all)
}

/// Runs the loop for `len` and returns its statements.
async fn loop_for(
    pool: &PgPool,
    layout: Layout,
    body_size: usize,
    every: Option<Duration>,
    len: Duration,
) -> anyhow::Result<Timed> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let run = insert_loop(pool, layout, body_size, every, Arc::new(rx));
    let timer = async {
        tokio::time::sleep(len).await;
        let _ = tx.send(true);
    };
    let (timed, ()) = tokio::join!(run, timer);
    timed
}

fn summary<'a>(timed: impl Iterator<Item = &'a (Instant, Instant)>) -> LatencySummary {
    let mut s = Samples::default();
    for (a, b) in timed {
        s.record(*b - *a);
    }
    s.summary()
}

async fn ingest(ctx: &Ctx) -> anyhow::Result<IngestCompare> {
    let rounds = if ctx.quick { 2 } else { 6 };
    let segment = ctx.secs(10, 3);
    let mut out = IngestCompare {
        batch: BATCH,
        writers: WRITERS,
        segment_seconds: segment.as_secs(),
        rounds,
        ..Default::default()
    };
    let mut dbs = Vec::new();
    for layout in [Layout::Unpartitioned, Layout::Partitioned] {
        let db = ctx
            .pg
            .create_db(&format!("ingest_{}", layout.name()))
            .await?;
        dbs.push(db);
    }
    let r = async {
        let old = prepare(ctx, &dbs[0], Layout::Unpartitioned, first_day()).await?;
        let new = prepare(ctx, &dbs[1], Layout::Partitioned, first_day()).await?;
        let mut sides = [
            (Layout::Unpartitioned, &old, Timed::new(), 0.0, Vec::new()),
            (Layout::Partitioned, &new, Timed::new(), 0.0, Vec::new()),
        ];
        for side in &sides {
            let warm = loop_for(side.1, side.0, ctx.body_size, None, segment / 3).await?;
            println!("    warm-up {}: {} statements", side.0.name(), warm.len());
        }
        for round in 0..rounds {
            // Forward, then backward: neither layout always goes first.
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let (layout, pool, timed, secs, per_round) = &mut sides[i];
                let clock = Instant::now();
                let t = loop_for(pool, *layout, ctx.body_size, None, segment).await?;
                let elapsed = clock.elapsed().as_secs_f64();
                let rate = (t.len() * BATCH) as f64 / elapsed;
                println!(
                    "    round {} {}: {:.0} events/s",
                    round + 1,
                    layout.name(),
                    rate
                );
                per_round.push(rate);
                *secs += elapsed;
                timed.extend(t);
            }
        }
        for (i, (layout, _, timed, secs, per_round)) in sides.into_iter().enumerate() {
            let events = (timed.len() * BATCH) as u64;
            let side = IngestSide {
                layout,
                events,
                seconds: secs,
                events_per_s: events as f64 / secs.max(1e-9),
                per_round,
                statement: summary(timed.iter()),
            };
            if i == 0 {
                out.old = side;
            } else {
                out.new = side;
            }
        }
        old.close().await;
        new.close().await;
        out.ratio = out.new.events_per_s / out.old.events_per_s.max(1e-9);
        out.ratio_per_round = out
            .new
            .per_round
            .iter()
            .zip(&out.old.per_round)
            .map(|(n, o)| n / o.max(1e-9))
            .collect();
        println!(
            "  => ingest partitioned {:.0} / unpartitioned {:.0} events/s = {:.3}x",
            out.new.events_per_s, out.old.events_per_s, out.ratio
        );
        Ok::<_, anyhow::Error>(())
    }
    .await;
    for db in &dbs {
        ctx.pg.drop_db(db).await;
    }
    r?;
    Ok(out)
}

// ---- 2. retention, 3. migration ----

/// `DAYS` days of `per_day` events, each with a succeeded job (its event's milliseconds) and
/// a succeeded attempt 1.5 s later (its own time), ids UUIDv7-shaped; on the partitioned
/// layout each event's dedupe key too. One transaction a day.
async fn seed(pool: &PgPool, layout: Layout, per_day: u64, body: usize) -> anyhow::Result<f64> {
    let clock = Instant::now();
    let uuid = |ms: &str, variant: char| {
        format!(
            "(lpad(to_hex({ms}), 12, '0') || '7' || lpad(to_hex(g % 4096), 3, '0') || \
             '{variant}' || lpad(to_hex(g), 15, '0'))::uuid"
        )
    };
    let rows = "FROM (SELECT g, $1::bigint + (g - $2::bigint) * 86400000 / $3::bigint AS ms \
                FROM generate_series($2::bigint, $2::bigint + $3::bigint - 1) AS g) s";
    let events = format!(
        "INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
           content_type, headers, body, verified_scheme, verified_secret_index) \
         SELECT {id}, 'default', 'stripe', 'evt_seed_' || g, 'invoice.paid', \
           to_timestamp(ms / 1000.0), 'application/json', \
           '[[\"content-type\",\"application/json\"]]'::jsonb, \
           convert_to(rpad('{{\"id\":\"evt_seed_' || g || '\",\"type\":\"invoice.paid\",\"pad\":\"', {pad}, 'x') || '\"}}', 'UTF8'), \
           'stripe-v1', 0 {rows}",
        id = uuid("ms", '8'),
        pad = body.saturating_sub(2),
    );
    let jobs = format!(
        "INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
           created_at, updated_at) \
         SELECT {jid}, {eid}, 'sink', 'succeeded', 1, to_timestamp(ms / 1000.0), \
           to_timestamp(ms / 1000.0), to_timestamp((ms + 1500) / 1000.0) {rows}",
        jid = uuid("ms", '9'),
        eid = uuid("ms", '8'),
    );
    let attempts = format!(
        "INSERT INTO delivery_attempts (id, job_id, attempt, worker_id, started_at, \
           duration_ms, status_code, outcome) \
         SELECT {aid}, {jid}, 1, 'bench', to_timestamp((ms + 1500) / 1000.0), 12, 200, \
           'succeeded' {rows}",
        aid = uuid("(ms + 1500)", 'a'),
        jid = uuid("ms", '9'),
    );
    let keys = format!(
        "INSERT INTO event_keys (source, provider_event_id, event_id, received_at) \
         SELECT 'stripe', 'evt_seed_' || g, {eid}, to_timestamp(ms / 1000.0) {rows}",
        eid = uuid("ms", '8'),
    );
    let mut statements = vec![&events, &jobs, &attempts];
    if layout == Layout::Partitioned {
        statements.insert(0, &keys);
    }
    let first = first_day().timestamp_millis();
    for d in 0..DAYS {
        let mut tx = pool.begin().await?;
        for sql in &statements {
            sqlx::query(sql)
                .bind(first + d as i64 * 86_400_000)
                .bind((d * per_day) as i64 + 1)
                .bind(per_day as i64)
                .execute(&mut *tx)
                .await
                .context("seeding")?;
        }
        tx.commit().await?;
        println!(
            "    {}: seeded day {} of {DAYS} ({:.0} s)",
            layout.name(),
            d + 1,
            clock.elapsed().as_secs_f64()
        );
    }
    let tables = if layout == Layout::Partitioned {
        "events, jobs, delivery_attempts, event_keys"
    } else {
        "events, jobs, delivery_attempts"
    };
    sqlx::raw_sql(&format!("VACUUM ANALYZE {tables}"))
        .execute(pool)
        .await?;
    sqlx::raw_sql("CHECKPOINT").execute(pool).await?;
    Ok(clock.elapsed().as_secs_f64())
}

async fn wal_lsn(pool: &PgPool) -> anyhow::Result<String> {
    Ok(
        sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
            .fetch_one(pool)
            .await?,
    )
}

async fn wal_since(pool: &PgPool, lsn: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint",
    )
    .bind(lsn)
    .fetch_one(pool)
    .await?)
}

async fn db_size_mb(pool: &PgPool) -> anyhow::Result<f64> {
    let bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(pool)
        .await?;
    Ok(bytes as f64 / 1_048_576.0)
}

/// Removes the day ending at `before` the layout's way. WAL is counted over the whole
/// server, so a removal beside the insert loop counts the loop's too (not recorded then).
async fn remove_day(
    pool: &PgPool,
    store: &hookgate::store::PgStore,
    layout: Layout,
    before: DateTime<Utc>,
) -> anyhow::Result<Removal> {
    let mut r = Removal::default();
    let lsn = wal_lsn(pool).await?;
    let clock = Instant::now();
    match layout {
        Layout::Unpartitioned => {
            // Planned afresh each time: a generic plan cached after five executions
            // estimates the pending jobs from statistics taken before the insert loop
            // queued its (never delivered) jobs, and then scans all of them for every
            // event. A gateway's queue stays short, so that is the bench's artefact.
            let mut conn = pool.acquire().await?;
            sqlx::raw_sql("SET plan_cache_mode = force_custom_plan")
                .execute(&mut *conn)
                .await?;
            loop {
                let started = Instant::now();
                let n = sqlx::query(OLD_DELETE)
                    .bind(before)
                    .bind(RETENTION_BATCH)
                    .execute(&mut *conn)
                    .await?
                    .rows_affected();
                r.slowest_statement_ms = r
                    .slowest_statement_ms
                    .max(started.elapsed().as_secs_f64() * 1000.0);
                r.events_removed += n;
                r.statements += 1;
                if n < RETENTION_BATCH as u64 {
                    break;
                }
            }
            sqlx::raw_sql("RESET plan_cache_mode")
                .execute(&mut *conn)
                .await?;
        }
        Layout::Partitioned => {
            let sweep = store
                .drop_expired_partitions(before, RETENTION_BATCH)
                .await?;
            r.drop_seconds = clock.elapsed().as_secs_f64();
            r.drop_wal_bytes = wal_since(pool, &lsn).await?;
            r.events_removed = sweep.expired_events;
            r.partitions_dropped = sweep.dropped;
            r.partitions_held = sweep.held;
            let keys_lsn = wal_lsn(pool).await?;
            let keys_clock = Instant::now();
            let keys = store.forget_expired_keys(before, RETENTION_BATCH).await?;
            r.keys_seconds = keys_clock.elapsed().as_secs_f64();
            r.keys_wal_bytes = wal_since(pool, &keys_lsn).await?;
            r.statements = keys / RETENTION_BATCH as u64 + 1;
        }
    }
    r.seconds = clock.elapsed().as_secs_f64();
    r.wal_bytes = wal_since(pool, &lsn).await?;
    Ok(r)
}

async fn retention(
    ctx: &Ctx,
    db: &str,
    layout: Layout,
    per_day: u64,
    out: &mut Partitions,
) -> anyhow::Result<RetentionSide> {
    let first = first_day();
    let pool = prepare(ctx, db, layout, first).await?;
    let mut side = RetentionSide {
        layout,
        stored_events: per_day * DAYS,
        ..Default::default()
    };
    side.seed_seconds = seed(&pool, layout, per_day, ctx.body_size.min(64)).await?;
    side.db_size_mb = db_size_mb(&pool).await?;
    println!(
        "    {}: {} events stored, {:.0} MB, seeded in {:.0} s",
        layout.name(),
        side.stored_events,
        side.db_size_mb,
        side.seed_seconds
    );
    let cfg = GwConfig::new(ctx.pg.url(db), "http://127.0.0.1:9/unused");
    let settings = hookgate::config::Settings::from_toml_str(&render_toml(&ctx.gw, &cfg))?;
    let config = hookgate::config::GatewayConfig::from_settings(&settings)?;
    let store = hookgate::store::Store::connect(&config.database)?;
    let hookgate::store::Store::Postgres(pg) = &store else {
        anyhow::bail!("not a PostgreSQL store");
    };

    let day = chrono::Duration::days(1);
    side.alone = remove_day(&pool, pg, layout, first + day).await?;
    println!(
        "    {}: the oldest day ({} events) removed in {:.2} s, {:.1} MB of WAL",
        layout.name(),
        side.alone.events_removed,
        side.alone.seconds,
        side.alone.wal_bytes as f64 / 1_048_576.0
    );
    sqlx::raw_sql("CHECKPOINT").execute(&pool).await?;

    // The next day, beside the fixed-rate insert loop: the loop alone first, then the removal.
    let (tx, rx) = tokio::sync::watch::channel(false);
    let body = ctx.body_size;
    let loop_pool = pool.clone();
    let inserting = tokio::spawn(async move {
        insert_loop(&loop_pool, layout, body, Some(LOOP_EVERY), Arc::new(rx)).await
    });
    let t0 = Instant::now();
    tokio::time::sleep(LOOP_BASELINE).await;
    let t1 = Instant::now();
    let removed = remove_day(&pool, pg, layout, first + day * 2).await;
    let t2 = Instant::now().max(t1 + MIN_WINDOW);
    tokio::time::sleep_until(t2.into()).await;
    let _ = tx.send(true);
    let timed = inserting.await??;
    side.under_load = removed?;
    side.loop_baseline = summary(timed.iter().filter(|(a, b)| *a >= t0 && *b <= t1));
    side.loop_during = summary(timed.iter().filter(|(a, b)| *a < t2 && *b > t1));
    println!(
        "    {}: the next day removed under the insert loop in {:.2} s; loop p99 {:.1} ms \
         (max {:.1}) during, {:.1} ms (max {:.1}) before",
        layout.name(),
        side.under_load.seconds,
        side.loop_during.p99_ms,
        side.loop_during.max_ms,
        side.loop_baseline.p99_ms,
        side.loop_baseline.max_ms
    );
    store.close().await;

    if layout == Layout::Unpartitioned {
        out.migration = Some(migrate(ctx, &pool, &cfg).await?);
    }
    pool.close().await;
    Ok(side)
}

/// The old-layout database as it is (its remaining days, vacuumed as autovacuum would have),
/// migrated by `hookgate migrate`.
async fn migrate(ctx: &Ctx, pool: &PgPool, cfg: &GwConfig) -> anyhow::Result<Migration> {
    sqlx::raw_sql("VACUUM ANALYZE events, jobs, delivery_attempts")
        .execute(pool)
        .await?;
    sqlx::raw_sql("CHECKPOINT").execute(pool).await?;
    let count = |t: &str| format!("SELECT count(*) FROM {t}");
    let mut m = Migration::default();
    for (t, n) in [
        ("events", &mut m.events),
        ("jobs", &mut m.jobs),
        ("delivery_attempts", &mut m.attempts),
    ] {
        let c: i64 = sqlx::query_scalar(&count(t)).fetch_one(pool).await?;
        *n = c as u64;
    }
    m.db_size_mb = db_size_mb(pool).await?;
    let lsn = wal_lsn(pool).await?;
    let clock = Instant::now();
    gateway::migrate(&ctx.gw, cfg)?;
    m.seconds = clock.elapsed().as_secs_f64();
    m.wal_bytes = wal_since(pool, &lsn).await?;
    m.seconds_per_million_events = m.seconds / (m.events as f64 / 1e6).max(1e-9);
    let migrated: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM _sqlx_migrations WHERE version = $1 AND success)",
    )
    .bind(PARTITION_MIGRATION)
    .fetch_one(pool)
    .await?;
    anyhow::ensure!(
        migrated,
        "hookgate migrate did not apply {PARTITION_MIGRATION}"
    );
    println!(
        "    migration of {} events ({:.0} MB): {:.1} s, {:.1} s per million events",
        m.events, m.db_size_mb, m.seconds, m.seconds_per_million_events
    );
    Ok(m)
}

// ---- the markdown ----

fn mb(bytes: i64) -> String {
    format!("{:.1} MB", bytes as f64 / 1_048_576.0)
}

impl Partitions {
    fn side(&self, layout: Layout) -> Option<&RetentionSide> {
        self.retention.iter().find(|r| r.layout == layout)
    }

    pub fn table_rows(&self, s: &mut String) {
        use crate::markdown::{met, rate};
        use std::fmt::Write as _;
        let i = &self.ingest;
        let _ = writeln!(
            s,
            "| Ingest statement, time-partitioned layout vs unpartitioned (SQL level, {} writers, {}-event batches, {} alternated rounds) | ≥ 0.95× | {} vs {} events/s | {:.3}× | {} |",
            i.writers,
            i.batch,
            i.rounds,
            rate(i.new.events_per_s),
            rate(i.old.events_per_s),
            i.ratio,
            met(i.ratio >= 0.95)
        );
        if let (Some(o), Some(n)) = (
            self.side(Layout::Unpartitioned),
            self.side(Layout::Partitioned),
        ) {
            let _ = writeln!(
                s,
                "| Retention of one day ({} events of {} stored): partition drop + key deletes vs batched DELETE | (no target) | {:.2} s, {} WAL vs {:.2} s, {} WAL | {:.3}× time | |",
                rate(n.alone.events_removed as f64),
                rate(o.stored_events as f64),
                n.alone.seconds,
                mb(n.alone.wal_bytes),
                o.alone.seconds,
                mb(o.alone.wal_bytes),
                n.alone.seconds / o.alone.seconds.max(1e-9)
            );
        }
        if let Some(m) = &self.migration {
            let _ = writeln!(
                s,
                "| Migration to time partitions (`hookgate migrate`, one transaction) | (no target) | {:.1} s per million events ({:.1} s for {}) | | |",
                m.seconds_per_million_events,
                m.seconds,
                rate(m.events as f64)
            );
        }
    }

    pub fn details(&self, s: &mut String) {
        use crate::markdown::rate;
        use std::fmt::Write as _;
        let _ = writeln!(
            s,
            "\nTime partitions ({}; {} days of {} events, {}-byte bodies, one succeeded job and one attempt each; retention batch {}; the insert loop beside a removal: {} events/s):\n\n| layout | remove the oldest day | WAL | statements | next day under the loop | loop p99 / max during | loop p99 / max before |\n| --- | --- | --- | --- | --- | --- | --- |",
            self.method,
            self.days,
            rate(self.events_per_day as f64),
            self.body_bytes.min(64),
            self.retention_batch,
            rate(self.loop_events_per_s),
        );
        for r in &self.retention {
            let split = if r.layout == Layout::Partitioned {
                format!(
                    " (drop {:.3} s, {}; keys {:.2} s, {})",
                    r.alone.drop_seconds,
                    mb(r.alone.drop_wal_bytes),
                    r.alone.keys_seconds,
                    mb(r.alone.keys_wal_bytes)
                )
            } else {
                format!(" (slowest batch {:.0} ms)", r.alone.slowest_statement_ms)
            };
            let _ = writeln!(
                s,
                "| {} | {:.2} s{} | {} | {} | {:.2} s | {:.1} / {:.1} ms ({} statements) | {:.1} / {:.1} ms |",
                r.layout.name(),
                r.alone.seconds,
                split,
                mb(r.alone.wal_bytes),
                r.alone.statements,
                r.under_load.seconds,
                r.loop_during.p99_ms,
                r.loop_during.max_ms,
                r.loop_during.count,
                r.loop_baseline.p99_ms,
                r.loop_baseline.max_ms
            );
        }
        if let Some(m) = &self.migration {
            let _ = writeln!(
                s,
                "\nMigration `20261209000001` on the unpartitioned database ({} events, {} jobs, {} attempts, {:.0} MB): {:.1} s, {} WAL.",
                rate(m.events as f64),
                rate(m.jobs as f64),
                rate(m.attempts as f64),
                m.db_size_mb,
                m.seconds,
                mb(m.wal_bytes)
            );
        }
    }
}
