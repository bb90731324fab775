//! PostgreSQL helpers: throwaway databases named `hookgate_bench_*`, server facts, bulk
//! seeding with `generate_series`, and the delivery-lag probe.

use std::time::Instant;

use anyhow::Context as _;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Connection as _, PgConnection};

/// The server, as `postgres://user@host:port` (no database).
#[derive(Debug, Clone)]
pub struct PgServer {
    pub base: String,
}

impl PgServer {
    pub fn url(&self, db: &str) -> String {
        format!("{}/{db}", self.base.trim_end_matches('/'))
    }

    async fn admin(&self) -> anyhow::Result<PgConnection> {
        PgConnection::connect(&self.url("postgres"))
            .await
            .with_context(|| format!("connecting to {}", self.url("postgres")))
    }

    /// A fresh, empty database `hookgate_bench_{tag}_{pid}`; returns its name.
    pub async fn create_db(&self, tag: &str) -> anyhow::Result<String> {
        let name = format!("hookgate_bench_{tag}_{}", std::process::id());
        let mut c = self.admin().await?;
        sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut c)
            .await?;
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&mut c)
            .await?;
        Ok(name)
    }

    pub async fn drop_db(&self, name: &str) {
        assert!(name.starts_with("hookgate_bench_"), "only bench databases");
        match self.admin().await {
            Ok(mut c) => {
                let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                if let Err(e) = sqlx::raw_sql(&sql).execute(&mut c).await {
                    eprintln!("warning: could not drop {name}: {e}");
                }
            }
            Err(e) => eprintln!("warning: could not drop {name}: {e}"),
        }
    }

    /// Drops `hookgate_bench_*_PID` databases left by bench processes that are gone.
    pub async fn drop_stale(&self) -> anyhow::Result<()> {
        let mut c = self.admin().await?;
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT datname FROM pg_database WHERE datname LIKE 'hookgate\\_bench\\_%'",
        )
        .fetch_all(&mut c)
        .await?;
        for name in names {
            let pid = name.rsplit('_').next().unwrap_or("");
            let alive = pid.parse::<u32>().is_ok()
                && std::path::Path::new(&format!("/proc/{pid}")).exists();
            if !alive {
                println!("  dropping stale database {name}");
                self.drop_db(&name).await;
            }
        }
        Ok(())
    }

    pub async fn pool(&self, db: &str, size: u32) -> anyhow::Result<PgPool> {
        Ok(PgPoolOptions::new()
            .max_connections(size)
            .connect(&self.url(db))
            .await?)
    }

    /// Connection slots not in use now (`max_connections` less current backends, less the
    /// slots reserved for superusers).
    pub async fn free_connections(&self) -> anyhow::Result<u32> {
        let mut c = self.admin().await?;
        let free: i64 = sqlx::query_scalar(
            "SELECT current_setting('max_connections')::int \
               - current_setting('superuser_reserved_connections')::int \
               - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')",
        )
        .fetch_one(&mut c)
        .await?;
        Ok(u32::try_from(free.max(0)).unwrap_or(0))
    }

    pub async fn setting(&self, name: &str) -> anyhow::Result<String> {
        let mut c = self.admin().await?;
        Ok(sqlx::query_scalar(&format!("SHOW {name}"))
            .fetch_one(&mut c)
            .await?)
    }
}

/// Age in seconds of the oldest due pending job (0 when none is due).
pub async fn delivery_lag(pool: &PgPool) -> anyhow::Result<f64> {
    Ok(sqlx::query_scalar(
        "SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(next_attempt_at)), 0)::float8 \
         FROM jobs WHERE status = 'pending' AND destination = 'sink' AND next_attempt_at <= now()",
    )
    .fetch_one(pool)
    .await?)
}

/// Jobs in `status`. The status is a literal in the SQL (not a parameter), so a cached
/// generic plan cannot lose the partial indexes on pending and in-progress jobs.
pub async fn count_jobs(pool: &PgPool, status: &str) -> anyhow::Result<i64> {
    anyhow::ensure!(
        ["pending", "in_progress", "succeeded", "failed"].contains(&status),
        "unknown job status {status:?}"
    );
    let sql = format!("SELECT count(*) FROM jobs WHERE status = '{status}'");
    Ok(sqlx::query_scalar(&sql).fetch_one(pool).await?)
}

/// How seeded rows look. They are received 7 days ago (one a millisecond): older than the
/// reconciler's default 24 h lookback, younger than the default 30-day retention, so
/// neither background sweep touches them while a scenario runs.
#[derive(Debug, Clone, Copy)]
pub struct Seed {
    /// Body bytes per event (a JSON object padded to this size).
    pub body_size: usize,
    /// The one job per event: `pending` and due now, or `succeeded`.
    pub job_status: &'static str,
}

/// A UUIDv7-shaped id from a row number: time-ordered like the gateway's own ids (from
/// 7 days ago), so bulk rows land in the indexes the way real ones do. `variant` tells
/// event ids from job ids.
fn seeded_uuid(n: &str, variant: char) -> String {
    v7_sql(
        &format!("(extract(epoch from now() - interval '7 days') * 1000)::bigint + {n}"),
        n,
        variant,
    )
}

/// SQL for a UUIDv7-shaped id of the unix milliseconds `ms` (an SQL expression), unique by
/// the row number `n` (another), with `variant` (one hex digit) telling the kinds of rows
/// apart: bulk rows that sort, and partition, by time like the gateway's own ids.
pub fn v7_sql(ms: &str, n: &str, variant: char) -> String {
    format!(
        "(lpad(to_hex({ms}), 12, '0') || '7' || lpad(to_hex({n} % 4096), 3, '0') || \
         '{variant}' || lpad(to_hex({n}), 15, '0'))::uuid"
    )
}

/// Inserts events `from+1 ..= to` (source `stripe`, provider ids `evt_` and 24 hex digits of
/// md5(n): spread over the key space like real ids) and one job
/// each, in committed chunks of at most `chunk`, printing progress.
pub async fn seed(
    pool: &PgPool,
    from: u64,
    to: u64,
    chunk: u64,
    seed: Seed,
) -> anyhow::Result<f64> {
    let clock = Instant::now();
    let events = format!(
        "INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
           content_type, headers, body, verified_scheme, verified_secret_index) \
         SELECT {id}, 'default', 'stripe', 'evt_' || substr(md5(n::text), 1, 24), 'invoice.paid', \
           now() - interval '7 days' + n * interval '1 millisecond', 'application/json', \
           '[[\"content-type\",\"application/json\"]]'::jsonb, \
           convert_to(rpad('{{\"id\":\"evt_seed_' || n || '\",\"type\":\"invoice.paid\",\"pad\":\"', {pad}, 'x') || '\"}}', 'UTF8'), \
           'stripe', 0 \
         FROM generate_series($1::bigint, $2::bigint) AS n",
        id = seeded_uuid("n", '8'),
        pad = seed.body_size.saturating_sub(2).max(80),
    );
    let (next_at, attempts) = if seed.job_status == "pending" {
        ("now()", 0)
    } else {
        (
            "now() - interval '7 days' + n * interval '1 millisecond'",
            1,
        )
    };
    let jobs = format!(
        "INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
           created_at, updated_at) \
         SELECT {jid}, {eid}, 'sink', '{status}', {attempts}, {next_at}, {next_at}, {next_at} \
         FROM generate_series($1::bigint, $2::bigint) AS n",
        jid = seeded_uuid("n", '9'),
        eid = seeded_uuid("n", '8'),
        status = seed.job_status,
    );
    // The dedupe keys ingest writes beside each event (`event_keys`), so a re-sent seeded
    // event is a duplicate, as it would be of an ingested one.
    let keys = format!(
        "INSERT INTO event_keys (source, provider_event_id, event_id, received_at) \
         SELECT 'stripe', 'evt_' || substr(md5(n::text), 1, 24), {eid}, \
           now() - interval '7 days' + n * interval '1 millisecond' \
         FROM generate_series($1::bigint, $2::bigint) AS n",
        eid = seeded_uuid("n", '8'),
    );
    let mut at = from;
    while at < to {
        let end = (at + chunk).min(to);
        let mut tx = pool.begin().await?;
        for sql in [&events, &keys, &jobs] {
            sqlx::query(sql)
                .bind((at + 1) as i64)
                .bind(end as i64)
                .execute(&mut *tx)
                .await
                .context("seeding")?;
        }
        tx.commit().await?;
        at = end;
        if to - from > chunk {
            println!(
                "    seeded {at} / {to} events ({:.0} s)",
                clock.elapsed().as_secs_f64()
            );
        }
    }
    sqlx::raw_sql("VACUUM ANALYZE events").execute(pool).await?;
    sqlx::raw_sql("VACUUM ANALYZE jobs").execute(pool).await?;
    sqlx::raw_sql("CHECKPOINT").execute(pool).await?;
    Ok(clock.elapsed().as_secs_f64())
}
