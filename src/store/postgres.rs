//! PostgreSQL backend: for production and for several gateway processes sharing one database.

mod ingest;
mod wakeups;

use std::collections::HashSet;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sqlx::PgConnection;
use sqlx::Row;
use uuid::Uuid;

use super::held::HeldConnections;
use super::{AttemptOutcome, ClaimedJob, JobOutcome, StoreError};
use crate::config::DatabaseConfig;
use crate::domain::{EventId, JobId};

const JOBS_CHANNEL: &str = "hookgate_jobs";
/// Arbitrary, fixed: the advisory lock key that elects one reconciler at a time.
const RECONCILE_LOCK_KEY: i64 = 0x686f_6f6b_6761_7465;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
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
    /// outcome against 154 us planned afresh, 57 of them planning; bench/RESULTS.md).
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
}

/// Delivery outcomes, many at once (see `finish_jobs`). A job is matched by id and claim
/// token alone: a token is set only together with `status = 'in_progress'`, and every
/// statement that ends the claim clears it. Naming the status as well would offer the
/// planner a second way in, every `in_progress` entry of `jobs_lease_idx` (dead ones
/// included), which it takes when the statistics say few jobs are in progress.
const FINISH_JOBS_SQL: &str = "\
    WITH o AS ( \
        SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::timestamptz[], $5::text[], \
            $6::timestamptz[], $7::uuid[], $8::int4[], $9::text[], $10::timestamptz[], \
            $11::int8[], $12::int4[], $13::text[]) \
            AS o(job_id, token, status, next_at, error, now, attempt_id, attempt, worker_id, \
                started_at, duration_ms, status_code, outcome) \
    ), applied AS ( \
        UPDATE jobs j SET status = o.status, \
            next_attempt_at = COALESCE(o.next_at, j.next_attempt_at), last_error = o.error, \
            locked_until = NULL, claim_token = NULL, updated_at = o.now \
        FROM o WHERE j.id = o.job_id AND j.claim_token = o.token \
        RETURNING j.id \
    ), recorded AS ( \
        INSERT INTO delivery_attempts (id, job_id, attempt, worker_id, started_at, \
            duration_ms, status_code, error, outcome) \
        SELECT o.attempt_id, o.job_id, o.attempt, o.worker_id, o.started_at, o.duration_ms, \
            o.status_code, o.error, \
            CASE WHEN o.job_id IN (SELECT id FROM applied) THEN o.outcome ELSE $14 END \
        FROM o \
    ) \
    SELECT id FROM applied";

/// Claims up to `$3` due jobs of one destination (see `claim_jobs`).
const CLAIM_JOBS_SQL: &str = "\
    WITH due AS ( \
        SELECT id FROM jobs \
        WHERE status = 'pending' AND destination = $1 AND next_attempt_at <= $2 \
        ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED \
     ), claimed AS ( \
        UPDATE jobs j SET status = 'in_progress', attempts = j.attempts + 1, \
            locked_until = $4, claim_token = $5, updated_at = $2 \
        FROM due WHERE j.id = due.id \
        RETURNING j.id, j.claim_token, j.attempts, j.destination, j.event_id \
     ) \
     SELECT c.id, c.claim_token, c.attempts, c.destination, c.event_id, e.source, \
        e.event_type, e.provider_event_id, e.content_type, e.body \
     FROM claimed c JOIN events e ON e.id = c.event_id";

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
        Ok(Self {
            ingest_connections: std::sync::Arc::new(HeldConnections::new(pool.clone())),
            relaxed_connections: relaxed_connections.clone(),
            job_wakeups: wakeups::JobWakeups::new(relaxed_connections),
            pool,
            relaxed,
            ingest_saw_copies: Default::default(),
        })
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub async fn claim_jobs(
        &self,
        destination: &str,
        limit: i64,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<ClaimedJob>, StoreError> {
        // SKIP LOCKED lets concurrent workers claim disjoint batches without waiting; the
        // statement is its own transaction, so nothing stays locked during delivery.
        let token = crate::domain::time_ordered_uuid();
        let rows = self
            .relaxed_connections
            .run(async |conn: &mut PgConnection| {
                sqlx::query(CLAIM_JOBS_SQL)
                    .bind(destination)
                    .bind(now)
                    .bind(limit)
                    .bind(lease_until)
                    .bind(token)
                    .fetch_all(conn)
                    .await
            })
            .await?;
        rows.iter()
            .map(|r| {
                Ok(ClaimedJob {
                    job_id: JobId::from_uuid(r.try_get("id")?),
                    claim_token: r.try_get("claim_token")?,
                    attempt: r.try_get("attempts")?,
                    destination: r.try_get("destination")?,
                    event_id: EventId::from_uuid(r.try_get("event_id")?),
                    source: r.try_get("source")?,
                    event_type: r.try_get("event_type")?,
                    provider_event_id: r.try_get("provider_event_id")?,
                    content_type: r.try_get("content_type")?,
                    body: r.try_get("body")?,
                })
            })
            .collect()
    }

    /// One statement for the whole batch: every update applies only where its claim token
    /// still holds the job, and every attempt is recorded (as `lease_lost` where it did not).
    pub async fn finish_jobs(&self, outcomes: &[JobOutcome]) -> Result<Vec<bool>, StoreError> {
        let statuses: Vec<_> = outcomes.iter().map(JobOutcome::status).collect();
        let query = sqlx::query_scalar(FINISH_JOBS_SQL)
            .bind(outcomes.iter().map(|o| o.job.as_uuid()).collect::<Vec<_>>())
            .bind(outcomes.iter().map(|o| o.claim_token).collect::<Vec<_>>())
            .bind(statuses.iter().map(|s| s.0).collect::<Vec<_>>())
            .bind(statuses.iter().map(|s| s.1).collect::<Vec<_>>())
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.error.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(outcomes.iter().map(|o| o.now).collect::<Vec<_>>())
            .bind(
                outcomes
                    .iter()
                    .map(|_| crate::domain::time_ordered_uuid())
                    .collect::<Vec<_>>(),
            )
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.attempt)
                    .collect::<Vec<_>>(),
            )
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.worker_id.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.started_at)
                    .collect::<Vec<_>>(),
            )
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.duration_ms)
                    .collect::<Vec<_>>(),
            )
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.status_code)
                    .collect::<Vec<_>>(),
            )
            .bind(
                outcomes
                    .iter()
                    .map(|o| o.record.outcome.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(AttemptOutcome::LeaseLost.as_str());
        let applied: Vec<Uuid> = self
            .relaxed_connections
            .run(async |conn: &mut PgConnection| query.fetch_all(conn).await)
            .await?;
        let applied: HashSet<Uuid> = applied.into_iter().collect();
        Ok(outcomes
            .iter()
            .map(|o| applied.contains(&o.job.as_uuid()))
            .collect())
    }

    pub async fn renew_lease(
        &self,
        job: JobId,
        claim_token: Uuid,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let done = self
            .relaxed_connections
            .run(async |conn: &mut PgConnection| {
                sqlx::query(
                    "UPDATE jobs SET locked_until = $1 \
                     WHERE id = $2 AND claim_token = $3 AND status = 'in_progress'",
                )
                .bind(until)
                .bind(job.as_uuid())
                .bind(claim_token)
                .execute(conn)
                .await
            })
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn listen_for_jobs(&self) -> Result<PgListener, StoreError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(JOBS_CHANNEL).await?;
        Ok(listener)
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

    /// (connections open, idle, maximum).
    /// The durable pool, for the statements both stores share (`store::sessions`).
    /// Wakes the workers of every process listening on this database.
    pub(super) fn wake_workers(&self) {
        self.job_wakeups.wake();
    }

    pub(super) fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn pool_usage(&self) -> (u32, usize, u32) {
        (
            self.pool.size(),
            self.pool.num_idle(),
            self.pool.options().get_max_connections(),
        )
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
