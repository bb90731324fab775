//! SQLite backend: the embedded default. WAL mode with `synchronous = FULL` by default, so a
//! commit survives a process crash and a power loss (`database.sqlite_synchronous = "normal"`:
//! a process crash only); writers queue in order for this process's write turn, then take
//! SQLite's write lock (each wait bounded by the busy timeout).

mod checkpoints;
mod ingest;
#[cfg(test)]
mod tests;

use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{Connection, Row, Sqlite};
use tokio::sync::Notify;
use uuid::Uuid;

pub(super) use super::codec::{millis, parse_uuid};
use super::held::HeldConnections;
use super::{batch, AttemptOutcome, ClaimedJob, InsertOutcome, JobOutcome, NewEvent, StoreError};
use crate::config::DatabaseConfig;
use crate::domain::{EventId, JobId};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// Wakes this process's workers when it queues jobs (SQLite has no LISTEN/NOTIFY).
    job_signal: Arc<Notify>,
    /// Ingest's writer keeps its connection between batches: each trip through the pool
    /// costs two pings, each a hand-off to the connection's thread and back.
    ingest_connections: Arc<HeldConnections<Sqlite>>,
    /// Taken by every write transaction (`write_connection`, ingest's writer) and by the
    /// WAL restart (`checkpoints`).
    write_turn: checkpoints::WriteTurn,
    /// The longest a write waits for its turn, as for SQLite's lock (`database.busy_timeout`).
    busy_timeout: std::time::Duration,
    /// Stopped at close, after the pool (`checkpoints::Running::stop`).
    checkpoints: Arc<std::sync::Mutex<Option<checkpoints::Running>>>,
}

impl SqliteStore {
    pub fn connect(config: &DatabaseConfig) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(&config.url)
            .map_err(StoreError::Database)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match config.sqlite_synchronous {
                crate::config::SqliteSynchronous::Full => SqliteSynchronous::Full,
                crate::config::SqliteSynchronous::Normal => SqliteSynchronous::Normal,
            })
            .busy_timeout(config.busy_timeout)
            .foreign_keys(true)
            // Checkpoints run in the background (`spawn_checkpoints`), not inside whichever
            // commit crosses the WAL size limit: that commit would wait for the checkpoint's
            // writes and fsync, and so would every request in its batch.
            .pragma("wal_autocheckpoint", "0");
        let pool = SqlitePoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout)
            .connect_lazy_with(options);
        Ok(Self {
            ingest_connections: Arc::new(HeldConnections::new(pool.clone())),
            pool,
            job_signal: Arc::new(Notify::new()),
            write_turn: Arc::default(),
            busy_timeout: config.busy_timeout,
            checkpoints: Arc::default(),
        })
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    /// Checkpoints the WAL every `every` while the pool is open, at idle CPU priority
    /// (`checkpoints`). PASSIVE never waits for readers or the writer, so it never delays a
    /// commit; what it cannot copy yet, the next round does.
    pub fn spawn_checkpoints(&self, every: std::time::Duration) {
        let running =
            checkpoints::Running::spawn(self.pool.clone(), every, self.write_turn.clone());
        // A second call replaces the first task, which its dropped sender stops.
        let _earlier = self.checkpoint_task().replace(running);
    }

    fn checkpoint_task(&self) -> std::sync::MutexGuard<'_, Option<checkpoints::Running>> {
        // Holding this lock never panics midway, so a poisoned one is still consistent.
        self.checkpoints.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One PASSIVE checkpoint on a pooled connection: (frames in the WAL, frames now copied
    /// into the database).
    pub async fn checkpoint(&self) -> Result<(i64, i64), StoreError> {
        checkpoints::checkpoint(&self.pool).await
    }

    /// A pooled connection, then this process's write turn (`checkpoints::WriteTurn`), for a
    /// write transaction that waits its turn here rather than in SQLite's busy handler. Always
    /// in that order, as ingest's writer takes them: a task holding the turn then never
    /// waits for a connection held by one waiting for the turn.
    pub(super) async fn write_connection(
        &self,
    ) -> Result<(PoolConnection<Sqlite>, tokio::sync::OwnedMutexGuard<()>), StoreError> {
        let conn = self.pool.acquire().await?;
        let turn = self.take_write_turn().await?;
        Ok((conn, turn))
    }

    /// The write turn, waited for at most the busy timeout, as SQLite's own lock would be:
    /// past it the write is refused as unavailable (ingest answers 503) instead of queueing
    /// on behind a writer that holds on.
    async fn take_write_turn(&self) -> Result<tokio::sync::OwnedMutexGuard<()>, StoreError> {
        tokio::time::timeout(self.busy_timeout, self.write_turn.clone().lock_owned())
            .await
            .map_err(|_| {
                StoreError::Unavailable(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "another write of this process held SQLite's write turn past the busy timeout",
                )))
            })
    }

    /// Takes and releases the write lock: with SQLite, "can store" means "can get that lock".
    pub async fn ping(&self) -> Result<(), StoreError> {
        let tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        tx.rollback().await?;
        Ok(())
    }

    /// Writes a batch in one transaction, so the whole batch costs one fsync.
    pub async fn insert_events(
        &self,
        events: &[NewEvent<'_>],
    ) -> Result<Vec<InsertOutcome>, StoreError> {
        let (uniques, slot) = batch::dedupe(events);
        let rows: Vec<&NewEvent<'_>> = uniques.iter().map(|&i| &events[i]).collect();
        let (outcomes, queued) = self
            .ingest_connections
            .run(async |conn: &mut SqliteConnection| {
                let _turn = self.take_write_turn().await?;
                // IMMEDIATE takes the write lock up front, so the transaction never has to
                // upgrade a read lock (which SQLite may refuse with SQLITE_BUSY without waiting).
                let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
                let answer = ingest::insert_batch(&mut tx, &rows).await?;
                tx.commit().await?;
                Ok::<_, StoreError>(answer)
            })
            .await?;
        if queued {
            self.job_signal.notify_one();
        }
        Ok(batch::answers(&uniques, &slot, &outcomes))
    }

    pub async fn claim_jobs(
        &self,
        destination: &str,
        limit: i64,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<ClaimedJob>, StoreError> {
        let token = crate::domain::time_ordered_uuid();
        let (mut conn, _turn) = self.write_connection().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        // One statement picks and claims: with the write lock held, no other claimer can
        // see these rows as pending in between.
        let claimed = sqlx::query(
            "UPDATE jobs SET status = 'in_progress', attempts = attempts + 1, \
                locked_until = ?1, claim_token = ?2, updated_at = ?3 \
             WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' AND destination = ?4 \
                AND next_attempt_at <= ?3 ORDER BY next_attempt_at LIMIT ?5) \
             RETURNING id",
        )
        .bind(millis(lease_until))
        .bind(token.to_string())
        .bind(millis(now))
        .bind(destination)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let mut jobs = Vec::with_capacity(claimed.len());
        for row in &claimed {
            let id: String = row.try_get("id")?;
            let r = sqlx::query(
                "SELECT j.id, j.attempts, j.destination, j.event_id, e.source, e.event_type, \
                    e.provider_event_id, e.content_type, e.body \
                 FROM jobs j JOIN events e ON e.id = j.event_id WHERE j.id = ?",
            )
            .bind(&id)
            .fetch_one(&mut *tx)
            .await?;
            let event_id: String = r.try_get("event_id")?;
            jobs.push(ClaimedJob {
                job_id: JobId::from_uuid(parse_uuid(&id)?),
                claim_token: token,
                attempt: r.try_get("attempts")?,
                destination: r.try_get("destination")?,
                event_id: EventId::from_uuid(parse_uuid(&event_id)?),
                source: r.try_get("source")?,
                event_type: r.try_get("event_type")?,
                provider_event_id: r.try_get("provider_event_id")?,
                content_type: r.try_get("content_type")?,
                body: r.try_get("body")?,
            });
        }
        tx.commit().await?;
        Ok(jobs)
    }

    /// All outcomes in one transaction (one commit, one fsync); each update applies only
    /// where its claim token still holds the job, and each attempt is recorded.
    pub async fn finish_jobs(&self, outcomes: &[JobOutcome]) -> Result<Vec<bool>, StoreError> {
        let (mut conn, _turn) = self.write_connection().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let mut applied = Vec::with_capacity(outcomes.len());
        let mut requeued = false;
        for o in outcomes {
            let (status, next_attempt_at) = o.status();
            let job = o.job.to_string();
            let done = sqlx::query(
                "UPDATE jobs SET status = ?, next_attempt_at = COALESCE(?, next_attempt_at), \
                 last_error = ?, locked_until = NULL, claim_token = NULL, updated_at = ? \
                 WHERE id = ? AND claim_token = ? AND status = 'in_progress'",
            )
            .bind(status)
            .bind(next_attempt_at.map(millis))
            .bind(o.record.error.as_deref())
            .bind(millis(o.now))
            .bind(&job)
            .bind(o.claim_token.to_string())
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
            let outcome = if done {
                o.record.outcome
            } else {
                AttemptOutcome::LeaseLost
            };
            sqlx::query(
                "INSERT INTO delivery_attempts (id, job_id, attempt, worker_id, started_at, \
                 duration_ms, status_code, error, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(crate::domain::time_ordered_uuid().to_string())
            .bind(&job)
            .bind(o.record.attempt)
            .bind(&o.record.worker_id)
            .bind(millis(o.record.started_at))
            .bind(o.record.duration_ms)
            .bind(o.record.status_code)
            .bind(o.record.error.as_deref())
            .bind(outcome.as_str())
            .execute(&mut *tx)
            .await?;
            requeued |= done && next_attempt_at.is_some();
            applied.push(done);
        }
        tx.commit().await?;
        if requeued {
            self.job_signal.notify_one();
        }
        Ok(applied)
    }

    pub async fn renew_lease(
        &self,
        job: JobId,
        claim_token: Uuid,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE jobs SET locked_until = ? \
             WHERE id = ? AND claim_token = ? AND status = 'in_progress'",
        )
        .bind(millis(until))
        .bind(job.to_string())
        .bind(claim_token.to_string())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    pub fn job_signal(&self) -> Arc<Notify> {
        self.job_signal.clone()
    }

    /// (connections open, idle, maximum).
    /// The durable pool, for the statements both stores share (`store::sessions`).
    /// Wakes this process's workers (SQLite has no LISTEN/NOTIFY).
    pub(super) fn wake_workers(&self) {
        self.job_signal.notify_one();
    }

    pub(super) fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    pub fn pool_usage(&self) -> (u32, usize, u32) {
        (
            self.pool.size(),
            self.pool.num_idle(),
            self.pool.options().get_max_connections(),
        )
    }

    /// Closes every connection, the checkpoint task's last, once the pool's have closed: the
    /// last connection to close folds the WAL into the database and deletes it.
    pub async fn close(&self) {
        self.ingest_connections.release_all();
        self.pool.close().await;
        let checkpoints = self.checkpoint_task().take();
        if let Some(running) = checkpoints {
            running.stop().await;
        }
    }
}
