//! PostgreSQL backend: for production and for several gateway processes sharing one database.

mod ingest;
mod partitions;
mod queue;
mod wakeups;

/// Ingest's and the queue's statements, for the tests that read their plans and the bench
/// that runs them beside older layouts' (re-exported hidden from `store`).
pub use ingest::INSERT_BATCH_FAST_SQL;
pub use queue::{CLAIM_JOBS_SQL, FINISH_JOBS_SQL};

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::PgConnection;

use super::held::HeldConnections;
use super::StoreError;
use crate::config::DatabaseConfig;

const JOBS_CHANNEL: &str = "hookgate_jobs";
/// Arbitrary, fixed: the advisory lock key that elects one reconciler at a time.
const RECONCILE_LOCK_KEY: i64 = 0x686f_6f6b_6761_7465;

#[derive(Debug, Clone)]
pub struct PgStore {
    /// The durable pool, for the statements both stores share.
    pub(super) pool: PgPool,
    /// Delivery bookkeeping (claims, outcomes, lease renewals) commits without waiting for
    /// the WAL flush: if the database crashes and loses the last few of these commits, a
    /// claim is simply not taken, or a job stays `in_progress` until its lease expires and it
    /// is delivered again (same `webhook-id`). At-least-once holds either way. Ingest and
    /// admin writes never use this pool: a 2xx needs a durable commit. A pool of its own, so
    /// each of these is one statement and one round trip.
    ///
    /// Its statements are planned afresh on every execution (`plan_cache_mode =
    /// force_custom_plan`). Left to choose, PostgreSQL caches a generic plan after five
    /// executions and keeps it until the table's statistics change; on a new database that
    /// plan is made while `jobs` holds a few pages, so the outcome statement kept a
    /// sequential scan of all of `jobs` per batch as the table grew (measured: 589 us per
    /// outcome against 154 us planned afresh, 57 of them planning; docs/decisions/delivery-relaxed-pool.md).
    /// Planning costs tens of microseconds per job; a plan that scans the queue costs its
    /// whole size.
    relaxed: PgPool,
    /// The worker's connections from `relaxed`, kept between statements: the claim loop and
    /// the outcome writer each run one statement at a time, back to back, and the pool's
    /// tests of a connection on its way in and out were two more round trips per statement
    /// on that serial path (see `HeldConnections`).
    relaxed_connections: std::sync::Arc<HeldConnections<sqlx::Postgres>>,
    /// Set when an ingest batch met a stored copy: the next batches skip the fast path
    /// until one goes through with no copy (see `insert_events`).
    ingest_saw_copies: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The ingest writers' connections, kept between batches (see `HeldConnections`).
    ingest_connections: std::sync::Arc<HeldConnections<sqlx::Postgres>>,
    /// Wakes listening workers after an ingest commit that queued jobs.
    job_wakeups: std::sync::Arc<wakeups::JobWakeups>,
    /// `database.read_url`: a streaming replica for the admin listings, or `pool` itself.
    /// What it shows trails the primary by the replica's lag; nothing written is read
    /// back from it.
    read: PgPool,
    /// The span of each time partition (`database.partition_interval`).
    partition_interval: std::time::Duration,
}

impl PgStore {
    pub fn connect(config: &DatabaseConfig) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(&config.url).map_err(StoreError::Database)?;
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout)
            .connect_lazy_with(options.clone());
        let relaxed = PgPoolOptions::new()
            .max_connections((config.max_connections / 2).max(2))
            .acquire_timeout(config.acquire_timeout)
            .connect_lazy_with(options.options([
                ("synchronous_commit", "off"),
                ("plan_cache_mode", "force_custom_plan"),
            ]));
        let relaxed_connections = std::sync::Arc::new(HeldConnections::new(relaxed.clone()));
        let read = match &config.read_url {
            Some(url) => PgPoolOptions::new()
                .max_connections(config.max_connections)
                .acquire_timeout(config.acquire_timeout)
                .connect_lazy_with(PgConnectOptions::from_str(url).map_err(StoreError::Database)?),
            None => pool.clone(),
        };
        Ok(Self {
            read,
            partition_interval: config.partition_interval,
            ingest_connections: std::sync::Arc::new(HeldConnections::new(pool.clone())),
            relaxed_connections: relaxed_connections.clone(),
            job_wakeups: wakeups::JobWakeups::new(relaxed_connections),
            pool,
            relaxed,
            ingest_saw_copies: Default::default(),
        })
    }

    /// The pool for admin listings: the replica when `database.read_url` names one.
    pub(super) fn read_pool(&self) -> &PgPool {
        &self.read
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// A session advisory lock on a connection of its own, so that closing the connection
    /// (or the process dying) releases it.
    pub async fn try_reconcile_lock(&self) -> Result<Option<PgConnection>, StoreError> {
        let mut conn = self.pool.acquire().await?.detach();
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(RECONCILE_LOCK_KEY)
            .fetch_one(&mut conn)
            .await?;
        Ok(locked.then_some(conn))
    }

    /// The relaxed pool's held connections, for the queue's bookkeeping (see `relaxed`).
    pub(super) fn relaxed(&self) -> &HeldConnections<sqlx::Postgres> {
        &self.relaxed_connections
    }

    /// Wakes the workers of every process listening on this database.
    pub(super) fn wake_workers(&self) {
        self.job_wakeups.wake();
    }

    pub async fn close(&self) {
        self.ingest_connections.release_all();
        self.relaxed_connections.release_all();
        self.job_wakeups.close();
        self.pool.close().await;
        self.relaxed.close().await;
    }
}

/// Unlocks before closing: the server notices a closed connection only later, and a sweep
/// started meanwhile would find the lock still held and skip.
pub(super) async fn release_reconcile_lock(mut conn: PgConnection) {
    use sqlx::Connection as _;
    let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(RECONCILE_LOCK_KEY)
        .execute(&mut conn)
        .await;
    let _ = conn.close().await;
}
