//! WAL checkpoints: on a connection whose thread has the lowest CPU priority, and a restart of
//! the WAL whenever it has grown past a bound.
//!
//! A checkpoint copies every page the WAL holds back into the database file: CPU work, done
//! every few tens of milliseconds (`store::SQLITE_CHECKPOINT_EVERY`), that competed with the
//! commits it follows (on a quiet 2-core machine it doubled ingest's p99 at half rate,
//! docs/decisions/sqlite-background-checkpoints.md). sqlx runs each SQLite connection on a thread of its own, spawned by
//! whichever thread opens the connection, and a Linux thread starts with its parent's
//! scheduling policy; so the checkpoint connection is opened from a short-lived thread that
//! first puts itself in `SCHED_IDLE`. Its checkpoints then run only on CPU time no other
//! thread of the machine wants. On a machine kept busy they would get almost none (an idle
//! thread weighs 3 against a normal one's 1,024), so a round that took longer than a second
//! counts as starved, and the next runs at normal priority.
//!
//! A PASSIVE checkpoint never starts the WAL over: only a commit that begins just after a
//! checkpoint has copied every frame does, which under steady load almost never happens. The
//! WAL then grew by ~20 kB per event (4 GB in 30 s of saturation), and once its early pages
//! had gone cold and left the page cache, every commit that finally wrote over them had to
//! read them back from disk first (frames are 4,120 bytes, so each write covers part of a
//! page). So once the WAL holds `restart_after_frames` frames, the round is followed by a
//! RESTART checkpoint, which holds off writers while it copies the few frames since the
//! PASSIVE one and starts the WAL from its beginning.
//!
//! A writer that SQLite holds off waits in SQLite's busy handler, which sleeps 1, 2, 5, 10 ms
//! and more between tries: a restart holding the lock for 3 ms cost the ingest batch behind
//! it 8, and at half the maximum rate these waits were ingest's p99. So the restart first
//! catches up with a second PASSIVE checkpoint at normal priority (which holds off no one),
//! then takes this process's write turn (`WriteTurn`), the same one every write
//! transaction takes: the batch behind it waits on that and starts the moment the restart
//! is done, without meeting SQLite's lock.
//!
//! SQLite syncs the database file only at the end of a checkpoint that copied the WAL up to
//! its current end (`walCheckpoint` in sqlite3.c). Under steady load a PASSIVE round almost
//! never does, since commits land while it copies, so the file's dirty pages piled up for a
//! whole restart cycle and whichever checkpoint first reached the end paid for all of them:
//! one 60-80 ms sync per cycle, about half the time inside the restart, under the write turn
//! (measured; see docs/decisions/). So each round that copied frames syncs the database file
//! itself, on a blocking thread and outside the turn, and the restart's own sync is left
//! only what arrived since. An extra sync takes nothing from SQLite's own guarantees.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePool};
use sqlx::{ConnectOptions, Connection, Executor, Sqlite};

use crate::store::StoreError;

/// The checkpoint connection's thread, as `top -H` and `/proc/<pid>/task/*/comm` show it.
pub const THREAD_NAME: &str = "wal-checkpoint";

/// WAL frames (of 4 KiB pages: 256 MiB) past which a round also restarts the WAL.
pub const RESTART_AFTER_FRAMES: i64 = 65_536;

/// How long a restart waits for the writer to commit and then for readers to move on; it
/// holds off writers meanwhile, so it gives up early and tries again next round.
const RESTART_WAIT: Duration = Duration::from_millis(50);

/// An idle round that took longer than this was starved. A fixed time, not a count of
/// intervals: rounds are frequent and small (`Store::spawn_maintenance`), and a machine at
/// saturation sees a round at normal priority about once a second.
pub const STARVED_AFTER: Duration = Duration::from_secs(1);

/// The longest wait between rounds. While rounds find nothing new to copy, the wait doubles
/// from the interval up to this, so an idle gateway does not wake 40 times a second; the
/// first writes after a quiet spell then wait at most this long for their round.
pub const QUIET_EVERY: Duration = Duration::from_millis(250);

/// The wait before the next round: the interval after a round that copied new frames or
/// restarted the WAL; else, after a round with nothing to copy or a failed one (`None`), the
/// last wait doubled, up to `QUIET_EVERY` (never below `every`), so that neither an idle
/// database nor a failing one is checkpointed (and logged) 40 times a second.
pub fn next_wait(last_wait: Duration, every: Duration, round: Option<&Round>) -> Duration {
    match round {
        Some(round) if round.synced_database || round.restarted => every,
        _ => (last_wait * 2).clamp(every, QUIET_EVERY.max(every)),
    }
}

/// This process's turn at SQLite's write lock, taken by every write transaction and by the
/// WAL restart, so that none of them waits for the lock in SQLite's busy handler.
pub type WriteTurn = Arc<tokio::sync::Mutex<()>>;

/// Which connection a round runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// The connection of its own, on a `SCHED_IDLE` thread.
    Idle,
    /// A pooled connection, at the priority of the rest of the process.
    Normal,
}

/// The next round's priority, from how the last one went.
pub fn next_priority(last: Option<(Priority, Duration)>) -> Priority {
    match last {
        Some((Priority::Idle, took)) if took > STARVED_AFTER => Priority::Normal,
        _ => Priority::Idle,
    }
}

/// What one round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    pub priority: Priority,
    /// Frames in the WAL when the checkpoint ran.
    pub frames: i64,
    /// Whether the WAL was started over after it.
    pub restarted: bool,
    /// Whether this round synced the database file (it does when it copied new frames).
    pub synced_database: bool,
}

/// The database file, opened a second time only to sync it, and how far it is synced.
#[derive(Default)]
struct DatabaseSync {
    file: DatabaseFile,
    /// The WAL's copied-frame count when the file was last synced.
    at_copied: Option<i64>,
}

#[derive(Default)]
enum DatabaseFile {
    #[default]
    NotOpen,
    Open(Arc<File>),
    /// Not a file this process can open (an in-memory database): nothing to sync.
    Unavailable,
}

impl DatabaseSync {
    /// Syncs the file at `path` if checkpoints copied frames into it since the last sync,
    /// and says how long that took. "Since" is told by the copied-frame count, which starts
    /// over with the WAL; a count that comes back equal skips one early sync, never SQLite's.
    async fn after_checkpoint(
        &mut self,
        path: &Path,
        copied: i64,
    ) -> Result<Option<Duration>, StoreError> {
        if copied <= 0 || self.at_copied == Some(copied) {
            return Ok(None);
        }
        let file = match &self.file {
            DatabaseFile::Open(file) => file.clone(),
            DatabaseFile::Unavailable => return Ok(None),
            DatabaseFile::NotOpen => match File::open(path) {
                Ok(file) => {
                    let file = Arc::new(file);
                    self.file = DatabaseFile::Open(file.clone());
                    file
                }
                Err(e) => {
                    tracing::debug!(error = %e, "the database is not a file to sync");
                    self.file = DatabaseFile::Unavailable;
                    return Ok(None);
                }
            },
        };
        let started = Instant::now();
        let synced = tokio::task::spawn_blocking(move || file.sync_data())
            .await
            .map_err(|_| sqlx::Error::WorkerCrashed)?;
        if let Err(e) = synced {
            // Opened again next time: what failed may be this descriptor.
            self.file = DatabaseFile::NotOpen;
            return Err(sqlx::Error::Io(e).into());
        }
        self.at_copied = Some(copied);
        Ok(Some(started.elapsed()))
    }
}

/// The checkpoints of one SQLite database, a round at a time.
pub struct Checkpointer {
    pool: SqlitePool,
    restart_after_frames: i64,
    write_turn: WriteTurn,
    idle_conn: Option<SqliteConnection>,
    /// A connection at normal priority: a restart holds off writers, so it must not wait for
    /// CPU time behind them.
    restart_conn: Option<SqliteConnection>,
    last: Option<(Priority, Duration)>,
    database: DatabaseSync,
}

impl Checkpointer {
    pub fn new(pool: SqlitePool, restart_after_frames: i64, write_turn: WriteTurn) -> Self {
        Self {
            pool,
            restart_after_frames,
            write_turn,
            idle_conn: None,
            restart_conn: None,
            last: None,
            database: DatabaseSync::default(),
        }
    }

    /// One PASSIVE checkpoint, at idle priority unless the last one starved, then a restart
    /// if the WAL has grown past the bound.
    pub async fn round(&mut self) -> Result<Round, StoreError> {
        let result = self.checkpoint_and_restart().await;
        if result.is_err() {
            // New connections next round: these may be what failed.
            self.close_connections().await;
        }
        result
    }

    async fn checkpoint_and_restart(&mut self) -> Result<Round, StoreError> {
        let priority = next_priority(self.last);
        let started = Instant::now();
        let done = match priority {
            Priority::Normal => {
                tracing::debug!("the last WAL checkpoint was starved; this one at normal priority");
                wal_checkpoint(&self.pool, "PASSIVE").await?
            }
            Priority::Idle => {
                if self.idle_conn.is_none() {
                    self.idle_conn = Some(connect_idle(&self.pool.connect_options()).await?.0);
                }
                let conn = self.idle_conn.as_mut().expect("connected above");
                wal_checkpoint(conn, "PASSIVE").await?
            }
        };
        self.last = Some((priority, started.elapsed()));
        let frames = done.frames;
        let options = self.pool.connect_options();
        let path = options.get_filename();
        let database_sync = self.database.after_checkpoint(path, done.copied).await?;
        tracing::debug!(
            ?priority,
            frames,
            copied = done.copied,
            round_ms = started.elapsed().as_millis() as u64,
            database_sync_ms = database_sync.map(|d| d.as_millis() as u64),
            "WAL checkpoint round"
        );
        let synced_database = database_sync.is_some();
        let mut restarted = false;
        if frames >= self.restart_after_frames {
            if self.restart_conn.is_none() {
                let options = SqliteConnectOptions::clone(&self.pool.connect_options())
                    .busy_timeout(RESTART_WAIT);
                self.restart_conn = Some(options.connect().await?);
            }
            let conn = self.restart_conn.as_mut().expect("connected above");
            // What the idle round left, so the restart, which holds writers off, has little.
            let catching_up = Instant::now();
            let left = wal_checkpoint(&mut *conn, "PASSIVE").await?;
            let catch_up_sync = self.database.after_checkpoint(path, left.copied).await?;
            let waiting = Instant::now();
            let _turn = self.write_turn.lock().await;
            let holding = Instant::now();
            // Busy: a writer or a reader outlasted RESTART_WAIT; the next round tries again.
            restarted = !wal_checkpoint(conn, "RESTART").await?.busy;
            tracing::debug!(
                frames,
                idle_round_ms = catching_up.duration_since(started).as_millis() as u64,
                catch_up_frames = left.frames - frames,
                catch_up_ms = waiting.duration_since(catching_up).as_millis() as u64,
                catch_up_sync_ms = catch_up_sync.map(|d| d.as_millis() as u64),
                turn_wait_ms = holding.duration_since(waiting).as_millis() as u64,
                restart_ms = holding.elapsed().as_millis() as u64,
                restarted,
                "WAL restart"
            );
            if restarted {
                self.database.at_copied = None;
            }
        }
        Ok(Round {
            priority,
            frames,
            restarted,
            synced_database,
        })
    }

    /// Closes rather than drops: a dropped connection closes later, on its own thread, and
    /// the WAL is deleted only when the last connection has closed.
    async fn close_connections(&mut self) {
        for conn in [self.idle_conn.take(), self.restart_conn.take()]
            .into_iter()
            .flatten()
        {
            let _ = conn.close().await;
        }
    }
}

/// The checkpoint task, running, and what stops it.
#[derive(Debug)]
pub struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Checkpoints every `every` while there are writes to copy, less often while there are
    /// none (`next_wait`), until stopped (or dropped).
    pub fn spawn(pool: SqlitePool, every: Duration, write_turn: WriteTurn) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(run(pool, every, write_turn, stopped));
        Self { stop, task }
    }

    /// Stops the task and waits until its connections have closed. Call it once the pool
    /// has closed, so that these are the last connections to close: it is the last one that
    /// folds the WAL into the database and deletes it, and two closing at once each see the
    /// other still open (stopping on the pool's own close event raced it that way).
    pub async fn stop(self) {
        let _ = self.stop.send(());
        // An error here is only a panic, already reported.
        let _ = self.task.await;
    }
}

async fn run(
    pool: SqlitePool,
    every: Duration,
    write_turn: WriteTurn,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let mut checkpointer = Checkpointer::new(pool.clone(), RESTART_AFTER_FRAMES, write_turn);
    tokio::pin!(stop);
    let mut wait = every;
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = &mut stop => break,
        }
        let round = checkpointer.round().await;
        wait = next_wait(wait, every, round.as_ref().ok());
        if let Err(e) = round {
            if !pool.is_closed() {
                tracing::warn!(error = %e, "WAL checkpoint failed; retrying");
            }
        }
    }
    checkpointer.close_connections().await;
}

/// The checkpoint connection, and whether its thread got the idle policy (it runs at normal
/// priority where the platform has no such policy or refuses it).
pub async fn connect_idle(
    options: &SqliteConnectOptions,
) -> Result<(SqliteConnection, bool), StoreError> {
    let options = options.clone().thread_name(|_| THREAD_NAME.to_owned());
    let runtime = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("wal-checkpoint-open".into())
        .spawn(move || {
            let idle = lower_this_threads_priority();
            // `connect` spawns the connection's thread from this one, which it inherits from.
            let connected = runtime.block_on(options.connect());
            let _ = tx.send(connected.map(|conn| (conn, idle)));
        })
        .map_err(sqlx::Error::Io)?;
    let (conn, idle) = rx.await.map_err(|_| sqlx::Error::WorkerCrashed)??;
    if !idle {
        tracing::info!("WAL checkpoints run at normal priority (no SCHED_IDLE here)");
    }
    Ok((conn, idle))
}

/// One PASSIVE checkpoint: (frames in the WAL, frames now copied into the database).
pub async fn checkpoint<'e, E>(executor: E) -> Result<(i64, i64), StoreError>
where
    E: Executor<'e, Database = Sqlite>,
{
    let done = wal_checkpoint(executor, "PASSIVE").await?;
    Ok((done.frames, done.copied))
}

/// What `PRAGMA wal_checkpoint` reports.
struct Checkpointed {
    /// It could not finish: a lock it waits for (RESTART) stayed taken.
    busy: bool,
    frames: i64,
    copied: i64,
}

async fn wal_checkpoint<'e, E>(executor: E, mode: &'static str) -> Result<Checkpointed, StoreError>
where
    E: Executor<'e, Database = Sqlite>,
{
    let (busy, frames, copied): (i64, i64, i64) =
        sqlx::query_as(&format!("PRAGMA wal_checkpoint({mode})"))
            .fetch_one(executor)
            .await?;
    Ok(Checkpointed {
        busy: busy != 0,
        frames,
        copied,
    })
}

#[cfg(target_os = "linux")]
fn lower_this_threads_priority() -> bool {
    use thread_priority::{
        set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
        ThreadPriority, ThreadSchedulePolicy,
    };
    set_thread_priority_and_policy(
        thread_native_id(),
        ThreadPriority::Min,
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
    )
    .is_ok()
}

#[cfg(not(target_os = "linux"))]
fn lower_this_threads_priority() -> bool {
    false
}
