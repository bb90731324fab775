//! The SQLite baseline: an in-process loop writing what one ingest writes (one events row,
//! one jobs row) as one `BEGIN IMMEDIATE` transaction per event, with the gateway's pragmas.

use std::path::Path;
use std::str::FromStr as _;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use crate::payload::{body, stored_headers_json, Scheme};
use crate::stats::{LatencySummary, Samples};

/// `PRAGMA synchronous` levels measured, each in WAL mode: FULL, the gateway's default (a
/// committed event survives a process crash and a power loss), and NORMAL (it survives a
/// process crash; the last commits before a power loss or OS crash may roll back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Full,
    Normal,
}

impl Level {
    pub fn pragma(self) -> &'static str {
        match self {
            Level::Full => "FULL",
            Level::Normal => "NORMAL",
        }
    }

    /// The gateway's `database.sqlite_synchronous` value.
    pub fn config(self) -> &'static str {
        match self {
            Level::Full => "full",
            Level::Normal => "normal",
        }
    }

    fn sqlx(self) -> SqliteSynchronous {
        match self {
            Level::Full => SqliteSynchronous::Full,
            Level::Normal => SqliteSynchronous::Normal,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PlainLoop {
    /// `PRAGMA synchronous` read back on the loop's connection (2 = FULL, 1 = NORMAL).
    pub synchronous_read_back: i64,
    pub events: u64,
    pub seconds: f64,
    pub events_per_s: f64,
    /// One transaction, `BEGIN` to durable `COMMIT`, with nothing else writing: the floor
    /// under any request latency the gateway can reach on this disk.
    pub transaction: LatencySummary,
}

fn options(path: &Path, level: Level) -> anyhow::Result<SqliteConnectOptions> {
    Ok(
        SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(level.sqlx())
            .busy_timeout(Duration::from_secs(5))
            .foreign_keys(true),
    )
}

/// The journal mode stored in a database file (`wal` once a WAL connection opened it).
pub async fn journal_mode(path: &Path) -> anyhow::Result<String> {
    let opts = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?;
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(opts)
        .await?;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&pool)
        .await?;
    pool.close().await;
    Ok(mode)
}

/// Runs the loop on a migrated database file for `duration`.
pub async fn run(
    path: &Path,
    level: Level,
    duration: Duration,
    body_size: usize,
) -> anyhow::Result<PlainLoop> {
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options(path, level)?)
        .await?;
    let synchronous_read_back: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(&pool)
        .await?;
    let headers = stored_headers_json(Scheme::Stripe, "evt_loop");
    let clock = Instant::now();
    let mut n = 0u64;
    let mut transactions = Samples::with_capacity(1 << 16);
    while clock.elapsed() < duration {
        let event_id = uuid::Uuid::now_v7().to_string();
        let provider_id = format!("evt_loop_{n}");
        let now = chrono::Utc::now().timestamp_millis();
        let bytes = body(Scheme::Stripe, &provider_id, now / 1000, body_size);
        let began = Instant::now();
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        let created: Option<String> = sqlx::query_scalar(
            "INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
             content_type, headers, body, verified_scheme, verified_secret_index) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (source, provider_event_id) DO NOTHING RETURNING id",
        )
        .bind(&event_id)
        .bind("default")
        .bind("stripe")
        .bind(&provider_id)
        .bind("invoice.paid")
        .bind(now)
        .bind("application/json; charset=utf-8")
        .bind(&headers)
        .bind(&bytes)
        .bind("stripe")
        .bind(0i32)
        .fetch_optional(&mut *tx)
        .await?;
        anyhow::ensure!(created.is_some(), "loop ids are unique");
        sqlx::query(
            "INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
             created_at, updated_at) VALUES (?, ?, 'sink', 'pending', 0, ?, ?, ?)",
        )
        .bind(uuid::Uuid::now_v7().to_string())
        .bind(&event_id)
        .bind(now)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        transactions.record(began.elapsed());
        n += 1;
    }
    let seconds = clock.elapsed().as_secs_f64();
    pool.close().await;
    Ok(PlainLoop {
        synchronous_read_back,
        events: n,
        seconds,
        events_per_s: n as f64 / seconds,
        transaction: transactions.summary(),
    })
}
