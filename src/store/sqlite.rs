//! SQLite backend: the embedded default. WAL mode with `synchronous = FULL` by default, so a
//! commit survives a process crash and a power loss (`database.sqlite_synchronous = "normal"`:
//! a process crash only); writers queue in order for this process's write turn, then take
//! SQLite's write lock (each wait bounded by the busy timeout).

mod admin;
mod checkpoints;
mod ingest;
mod missing_jobs;
mod retention;
#[cfg(test)]
mod tests;

use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Connection, Row, Sqlite};
use tokio::sync::Notify;
use uuid::Uuid;

use super::held::HeldConnections;
use super::{
    batch, headers_from_json, AttemptOutcome, ClaimedJob, ExpiredLease, InsertOutcome, JobOutcome,
    NewEvent, StoreError, StoredAttempt, StoredEvent, StoredJob,
};
use crate::config::DatabaseConfig;
use crate::domain::{EventId, JobId};
use crate::queue::JobStatus;

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

const JOB_COLUMNS: &str = "id, event_id, destination, status, attempts, next_attempt_at, \
    locked_until, last_error, created_at, updated_at, discarded_at";

const EVENT_COLUMNS: &str = "id, tenant, source, provider_event_id, event_type, received_at, \
    content_type, headers, body, verified_scheme, verified_secret_index";

pub(super) fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(super) fn from_millis(ms: i64) -> Result<DateTime<Utc>, StoreError> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| StoreError::Corrupt(format!("timestamp {ms} out of range")))
}

pub(super) fn parse_uuid(s: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(s).map_err(|_| StoreError::Corrupt(format!("bad uuid {s:?}")))
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

    pub async fn get_event(&self, id: EventId) -> Result<Option<StoredEvent>, StoreError> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE id = ?");
        let row = sqlx::query(&sql)
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| event_from_row(&r)).transpose()
    }

    pub async fn find_event(
        &self,
        source: &str,
        provider_event_id: &str,
    ) -> Result<Option<StoredEvent>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE source = ? AND provider_event_id = ?"
        );
        let row = sqlx::query(&sql)
            .bind(source)
            .bind(provider_event_id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| event_from_row(&r)).transpose()
    }

    pub async fn jobs_for_event(&self, id: EventId) -> Result<Vec<StoredJob>, StoreError> {
        let sql =
            format!("SELECT {JOB_COLUMNS} FROM jobs WHERE event_id = ? ORDER BY destination, id");
        let rows = sqlx::query(&sql)
            .bind(id.to_string())
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(job_from_row).collect()
    }

    pub async fn get_job(&self, id: JobId) -> Result<Option<StoredJob>, StoreError> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?");
        let row = sqlx::query(&sql)
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    pub async fn attempts_for_job(&self, id: JobId) -> Result<Vec<StoredAttempt>, StoreError> {
        let rows = sqlx::query(
            "SELECT job_id, attempt, worker_id, started_at, duration_ms, status_code, error, \
             outcome FROM delivery_attempts WHERE job_id = ? ORDER BY id",
        )
        .bind(id.to_string())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let job_id: String = r.try_get("job_id")?;
                Ok(StoredAttempt {
                    job_id: JobId::from_uuid(parse_uuid(&job_id)?),
                    attempt: r.try_get("attempt")?,
                    worker_id: r.try_get("worker_id")?,
                    started_at: from_millis(r.try_get("started_at")?)?,
                    duration_ms: r.try_get("duration_ms")?,
                    status_code: r.try_get("status_code")?,
                    error: r.try_get("error")?,
                    outcome: r.try_get("outcome")?,
                })
            })
            .collect()
    }

    pub async fn count_jobs(&self, status: JobStatus) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status = ?")
                .bind(status.as_str())
                .fetch_one(&self.pool)
                .await?,
        )
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

    pub async fn expired_leases(
        &self,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<ExpiredLease>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, claim_token, attempts, destination FROM jobs \
             WHERE status = 'in_progress' AND locked_until < ? ORDER BY locked_until LIMIT ?",
        )
        .bind(millis(now))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get("id")?;
                let token: String = r.try_get("claim_token")?;
                Ok(ExpiredLease {
                    job_id: JobId::from_uuid(parse_uuid(&id)?),
                    claim_token: parse_uuid(&token)?,
                    attempts: r.try_get("attempts")?,
                    destination: r.try_get("destination")?,
                })
            })
            .collect()
    }

    pub fn job_signal(&self) -> Arc<Notify> {
        self.job_signal.clone()
    }

    /// Jobs that are not finished successfully, by status and destination (succeeded jobs
    /// are unbounded and left to the delivery counters).
    pub async fn count_jobs_by_status(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        Ok(sqlx::query_as(super::gauges_sql::COUNT_UNFINISHED_JOBS)
            .fetch_all(&self.pool)
            .await?)
    }

    /// Age of the oldest due pending job.
    pub async fn delivery_lag(
        &self,
        now: DateTime<Utc>,
    ) -> Result<std::time::Duration, StoreError> {
        let oldest: Option<i64> = sqlx::query_scalar(&super::gauges_sql::oldest_due_pending("?1"))
            .bind(millis(now))
            .fetch_one(&self.pool)
            .await?;
        let oldest: Option<DateTime<Utc>> = oldest.map(from_millis).transpose()?;
        Ok(oldest
            .and_then(|t| (now - t).to_std().ok())
            .unwrap_or_default())
    }

    /// (connections open, idle, maximum).
    /// The durable pool, for the statements both stores share (`store::sessions`).
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

    pub async fn count_events(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM events")
            .fetch_one(&self.pool)
            .await?)
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

fn event_from_row(r: &SqliteRow) -> Result<StoredEvent, StoreError> {
    let id: String = r.try_get("id")?;
    let headers: String = r.try_get("headers")?;
    Ok(StoredEvent {
        id: EventId::from_uuid(parse_uuid(&id)?),
        tenant: r.try_get("tenant")?,
        source: r.try_get("source")?,
        provider_event_id: r.try_get("provider_event_id")?,
        event_type: r.try_get("event_type")?,
        received_at: from_millis(r.try_get("received_at")?)?,
        content_type: r.try_get("content_type")?,
        headers: headers_from_json(&headers)?,
        body: r.try_get("body")?,
        verified_scheme: r.try_get("verified_scheme")?,
        verified_secret_index: r.try_get("verified_secret_index")?,
    })
}

pub(super) fn job_from_row(r: &SqliteRow) -> Result<StoredJob, StoreError> {
    let id: String = r.try_get("id")?;
    let event_id: String = r.try_get("event_id")?;
    let status: String = r.try_get("status")?;
    let locked_until: Option<i64> = r.try_get("locked_until")?;
    let discarded_at: Option<i64> = r.try_get("discarded_at")?;
    Ok(StoredJob {
        id: JobId::from_uuid(parse_uuid(&id)?),
        event_id: EventId::from_uuid(parse_uuid(&event_id)?),
        destination: r.try_get("destination")?,
        status: JobStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("job status {status:?}")))?,
        attempts: r.try_get("attempts")?,
        next_attempt_at: from_millis(r.try_get("next_attempt_at")?)?,
        locked_until: locked_until.map(from_millis).transpose()?,
        last_error: r.try_get("last_error")?,
        created_at: from_millis(r.try_get("created_at")?)?,
        updated_at: from_millis(r.try_get("updated_at")?)?,
        discarded_at: discarded_at.map(from_millis).transpose()?,
    })
}
