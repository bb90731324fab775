//! All SQL lives below this module; callers see only `Store`. A statement both databases run
//! is written once with `$N` placeholders (sqlx's SQLite driver binds `$N` to the N-th
//! argument, as PostgreSQL does) and run on whichever pool is in use (`dispatch!`,
//! `in_write_tx!`); ids and times, which the schemas store differently, are bound and read
//! through `codec`. `postgres/` and `sqlite/` hold only what the databases do differently.

/// Runs the same code on whichever backend is in use: `$body` is expanded once per backend,
/// with `$s` that backend's store.
macro_rules! dispatch {
    ($self:ident, $s:ident => $body:expr) => {
        match $self {
            Store::Postgres($s) => $body,
            Store::Sqlite($s) => $body,
        }
    };
}

/// As `dispatch!`, with `$pool` the pool for admin listings: PostgreSQL's read replica
/// (`database.read_url`) when there is one, else the store's pool.
macro_rules! dispatch_listing {
    ($self:ident, $pool:ident => $body:expr) => {
        match $self {
            Store::Postgres(s) => {
                let $pool = s.read_pool();
                $body
            }
            Store::Sqlite(s) => {
                let $pool = &s.pool;
                $body
            }
        }
    };
}

/// The claim's ordering rule, for a pending job `j` of destination `$1`: unordered, or no
/// job of its key is ahead of it (earlier in the line, and pending, in progress, or a dead
/// letter that holds the line). The second test is written as `jobs_ordering_ahead_idx`'s
/// predicate, so it is one probe of that small index; an unordered job never reaches it.
macro_rules! nothing_ahead_sql {
    () => {
        "(j.ordering_key IS NULL OR NOT EXISTS (SELECT 1 FROM jobs a \
            WHERE a.destination = j.destination AND a.ordering_key = j.ordering_key \
            AND a.ordering_seq < j.ordering_seq AND a.ordering_key IS NOT NULL \
            AND (a.status IN ('pending', 'in_progress') \
                OR (a.status = 'failed' AND a.ordering_hold AND a.discarded_at IS NULL))))"
    };
}

/// Runs `$body` in a write transaction on whichever backend is in use and commits it; the
/// body's value is the result. PostgreSQL begins on the durable pool; SQLite begins
/// IMMEDIATE on a connection holding this process's write turn, so the transaction never
/// has to upgrade a read lock (which SQLite may refuse with SQLITE_BUSY without waiting).
/// The body may `return` early, which rolls the transaction back.
macro_rules! in_write_tx {
    ($self:ident, $tx:ident => $body:expr) => {
        match $self {
            Store::Postgres(s) => {
                let mut $tx = s.pool.begin().await?;
                let out = $body;
                $tx.commit().await?;
                out
            }
            Store::Sqlite(s) => {
                let (mut conn, _turn) = s.write_connection().await?;
                let mut $tx = sqlx::Connection::begin_with(&mut *conn, "BEGIN IMMEDIATE").await?;
                let out = $body;
                $tx.commit().await?;
                out
            }
        }
    };
}

/// Binds a built statement's arguments (`admin_sql::Built`) to `$query`.
macro_rules! bind_built {
    ($query:expr, $built:expr) => {
        $built.args.iter().fold($query, |q, a| match a {
            admin_sql::Arg::Text(v) => q.bind(v.as_str()),
            admin_sql::Arg::Time(v) => q.bind(codec::At(*v)),
            admin_sql::Arg::Id(v) => q.bind(codec::Id(*v)),
            admin_sql::Arg::Int(v) => q.bind(*v),
        })
    };
}

/// A statement that inserts a job from its event row `e`, in the backend's form: as written
/// for SQLite, whose foreign key checks the event; with `FOR KEY SHARE OF e` for PostgreSQL,
/// where no foreign key ties the partitioned tables, so the statement takes the lock the
/// key's check took and the event cannot be deleted before the job commits.
macro_rules! job_from_event_sql {
    ($sql:literal) => {
        JobFromEventSql {
            sqlite: $sql,
            postgres: concat!($sql, " FOR KEY SHARE OF e"),
        }
    };
}

/// Both forms of a `job_from_event_sql!` statement.
struct JobFromEventSql {
    sqlite: &'static str,
    postgres: &'static str,
}

impl JobFromEventSql {
    fn for_store(&self, store: &Store) -> &'static str {
        match store {
            Store::Postgres(_) => self.postgres,
            Store::Sqlite(_) => self.sqlite,
        }
    }
}

#[macro_use]
mod idempotency;
mod admin;
mod admin_sql;
mod admin_types;
mod batch;
mod codec;
mod destinations;
mod group_commit;
mod held;
mod missing_jobs;
mod postgres;
mod quarantine;
mod queue;
mod reads;
mod reconciliation;
mod retention;
mod rows;
mod series;
mod sessions;
mod sqlite;
mod types;
mod undelivered;

use std::time::Duration;

use crate::config::DatabaseConfig;

pub use admin_types::{
    BulkProgress, DeadLetterFilter, EventFilter, EventStatus, EventSummary, IdempotencyBegin,
    JobWithEvent, NewJob, PageCursor, ProgressKey, ReplayRouting, SavedResponse,
};
pub use destinations::{CircuitChange, DestinationStats, Hold, RECENT_ATTEMPTS};
pub use group_commit::{GroupCommit, Pacing};
pub use missing_jobs::{MissingJob, RerouteScan};
pub use postgres::PgStore;
#[doc(hidden)]
pub use postgres::{CLAIM_JOBS_SQL, FINISH_JOBS_SQL, INSERT_BATCH_FAST_SQL};
pub use quarantine::{NewQuarantined, QuarantineFilter, QuarantineSummary, Quarantined, Walk};
pub use queue::JobWaker;
pub use reconciliation::{ReconciliationEnd, ReconciliationRun, ReconciliationState};
pub use retention::RetentionSwept;
pub use sessions::StoredSession;
pub use sqlite::SqliteStore;
pub use types::{
    ArrivalCursor, AttemptOutcome, AttemptRecord, ClaimedJob, ExpiredLease, InsertOutcome,
    JobOutcome, JobUpdate, NewEvent, NewEventJob, PreClaim, StoredAttempt, StoredEvent, StoredJob,
};
pub use undelivered::{Undelivered, UndeliveredFilter, UndeliveredReason};

/// How often SQLite's WAL is checkpointed. Small and often: each round ends with a sync of
/// the database file, and a commit's WAL sync issued meanwhile waits for it, since a disk's
/// flush waits for the writes queued ahead of it. A round's sync is as long as the pages it
/// copied, and most of those are the dedupe index's leaves, one per event (its keys are
/// random), which fewer rounds do not save; more rounds cost only the right-most pages of
/// the other indexes, copied again each time. Measured (see docs/decisions/): 1 s to 250 ms
/// took the p99 at 4,000 events/s from 12-69 ms to 6.7-9.5 ms; 250 ms to 25 ms took the p99
/// at half the maximum rate at FULL from 23.7-26.4 ms to 7.6-8.3 ms, for about 6 % of the
/// maximum rate. While there is nothing to copy, rounds slow down.
pub const SQLITE_CHECKPOINT_EVERY: Duration = Duration::from_millis(25);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or cannot take the write now; the caller may retry.
    #[error("the store is unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
    /// The input holds what no store can take (a NUL in text): the caller's to fix.
    #[error("{0}")]
    Unstorable(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_) => Self::Unavailable(e),
            sqlx::Error::Database(db) if is_transient(db.code().as_deref()) => Self::Unavailable(e),
            _ => Self::Database(e),
        }
    }
}

/// SQLite busy/locked, and PostgreSQL classes 08 (connection), 53 (resources), 57P (shutdown)
/// and 40 (serialization): conditions a later retry can get past.
pub(super) fn is_transient(code: Option<&str>) -> bool {
    let Some(code) = code else { return false };
    matches!(code, "5" | "6" | "261" | "262" | "517" | "773")
        || code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("57P")
        || code.starts_with("40")
}

/// The store, chosen by the database URL's scheme.
#[derive(Debug, Clone)]
pub enum Store {
    Postgres(PgStore),
    Sqlite(SqliteStore),
}

impl Store {
    /// Connects lazily: a database that is down at start-up is reported by `migrate`/`ping`.
    pub fn connect(config: &DatabaseConfig) -> Result<Self, StoreError> {
        if config.url.starts_with("sqlite:") {
            Ok(Self::Sqlite(SqliteStore::connect(config)?))
        } else {
            Ok(Self::Postgres(PgStore::connect(config)?))
        }
    }

    /// Background upkeep a serving process runs: SQLite's WAL checkpoints.
    pub fn spawn_maintenance(&self) {
        if let Self::Sqlite(s) = self {
            s.spawn_checkpoints(SQLITE_CHECKPOINT_EVERY);
        }
    }

    pub fn backend_name(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Sqlite(_) => "sqlite",
        }
    }

    /// How many write transactions are worth running at once: SQLite has one writer.
    pub fn write_parallelism(&self, configured: usize) -> usize {
        match self {
            Self::Postgres(_) => configured,
            Self::Sqlite(_) => 1,
        }
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        static POSTGRES: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");
        static SQLITE: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
        match self {
            Self::Postgres(s) => {
                POSTGRES.run(&s.pool).await?;
                s.ensure_partitions(chrono::Utc::now()).await?;
            }
            Self::Sqlite(s) => SQLITE.run(&s.pool).await?,
        }
        Ok(())
    }

    /// Succeeds only while the store could take a write.
    pub async fn ping(&self) -> Result<(), StoreError> {
        dispatch!(self, s => s.ping().await)
    }

    /// Inserts the event and, only if it is new, one pending job per destination, in one
    /// transaction. A concurrent insert of the same (source, provider id) ends as `Duplicate`.
    pub async fn insert_event(&self, event: &NewEvent<'_>) -> Result<InsertOutcome, StoreError> {
        let outcomes = self.insert_events(std::slice::from_ref(event)).await?;
        Ok(outcomes[0])
    }

    /// Group commit: a batch of events in one transaction. Each event's outcome is as if it
    /// were inserted alone; copies of one event in the batch make one row, and every copy is
    /// answered with its id. If the transaction fails, every event in it fails.
    pub async fn insert_events(
        &self,
        events: &[NewEvent<'_>],
    ) -> Result<Vec<InsertOutcome>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        dispatch!(self, s => s.insert_events(events).await)
    }

    /// (connections open, idle, maximum) of the pool.
    pub fn pool_usage(&self) -> (u32, usize, u32) {
        dispatch!(self, s => (
            s.pool.size(),
            s.pool.num_idle(),
            s.pool.options().get_max_connections(),
        ))
    }

    /// The right to run the reconciler's sweep. On PostgreSQL an advisory lock makes it one
    /// process at a time; SQLite's single writer already serialises sweeps.
    pub async fn try_reconcile_lock(&self) -> Result<Option<ReconcileLock>, StoreError> {
        match self {
            Self::Postgres(s) => Ok(s.try_reconcile_lock().await?.map(ReconcileLock::Postgres)),
            Self::Sqlite(_) => Ok(Some(ReconcileLock::Unneeded)),
        }
    }

    /// Wakes workers after a commit that queued jobs.
    pub(crate) fn wake_workers(&self) {
        dispatch!(self, s => s.wake_workers())
    }

    pub async fn close(&self) {
        dispatch!(self, s => s.close().await)
    }
}

pub enum ReconcileLock {
    /// Held by a dedicated connection; released when it is dropped and closes.
    Postgres(sqlx::PgConnection),
    Unneeded,
}

impl ReconcileLock {
    pub async fn release(self) {
        if let Self::Postgres(conn) = self {
            postgres::release_reconcile_lock(conn).await;
        }
    }
}

pub(crate) fn headers_from_json(text: &str) -> Result<Vec<(String, String)>, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("headers column: {e}")))
}
