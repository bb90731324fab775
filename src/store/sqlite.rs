//! SQLite backend: the embedded default. WAL mode with `synchronous = FULL` by default, so a
//! commit survives a process crash and a power loss (`database.sqlite_synchronous = "normal"`:
//! a process crash only); writers queue in order for this process's write turn, then take
//! SQLite's write lock (each wait bounded by the busy timeout).

mod checkpoints;
mod ingest;
mod queue;
#[cfg(test)]
mod tests;

use std::str::FromStr;
use std::sync::Arc;

use sqlx::pool::PoolConnection;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{Connection, Sqlite};
use tokio::sync::Notify;

pub(super) use super::codec::{millis, parse_uuid};
use super::held::HeldConnections;
use super::{batch, InsertOutcome, NewEvent, StoreError};
use crate::config::DatabaseConfig;

#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// The durable pool, for the statements both stores share.
    pub(super) pool: SqlitePool,
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

    /// Wakes this process's workers (SQLite has no LISTEN/NOTIFY).
    pub(super) fn wake_workers(&self) {
        self.job_signal.notify_one();
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
