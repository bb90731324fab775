//! All SQL lives below this module: one file per backend. Callers see only `Store`.

mod postgres;
mod sqlite;

use chrono::{DateTime, Utc};

use crate::config::DatabaseConfig;
use crate::domain::{EventId, JobId, Name, ProviderEventId};

pub use postgres::PgStore;
pub use sqlite::SqliteStore;

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
fn is_transient(code: Option<&str>) -> bool {
    let Some(code) = code else { return false };
    matches!(code, "5" | "6" | "261" | "262" | "517" | "773")
        || code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("57P")
        || code.starts_with("40")
}

/// A verified event ready to be written, with the jobs it fans out to.
#[derive(Debug)]
pub struct NewEvent<'a> {
    pub id: EventId,
    pub tenant: &'a Name,
    pub source: &'a Name,
    pub provider_event_id: &'a ProviderEventId,
    pub event_type: Option<&'a str>,
    pub received_at: DateTime<Utc>,
    pub content_type: Option<&'a str>,
    /// JSON array of `[name, value]` pairs, in arrival order.
    pub headers_json: String,
    pub body: &'a [u8],
    pub verified_scheme: &'a str,
    pub verified_secret_index: i32,
    pub destinations: &'a [Name],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertOutcome {
    Created(EventId),
    /// The (source, provider event id) pair was already stored, under this id.
    Duplicate(EventId),
}

#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub id: EventId,
    pub tenant: String,
    pub source: String,
    pub provider_event_id: String,
    pub event_type: Option<String>,
    pub received_at: DateTime<Utc>,
    pub content_type: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub verified_scheme: String,
    pub verified_secret_index: i32,
}

#[derive(Debug, Clone)]
pub struct StoredJob {
    pub id: JobId,
    pub event_id: EventId,
    pub destination: String,
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
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

    pub fn backend_name(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Sqlite(_) => "sqlite",
        }
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        match self {
            Self::Postgres(s) => s.migrate().await,
            Self::Sqlite(s) => s.migrate().await,
        }
    }

    /// Succeeds only while the store could take a write.
    pub async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Self::Postgres(s) => s.ping().await,
            Self::Sqlite(s) => s.ping().await,
        }
    }

    /// Inserts the event and, only if it is new, one pending job per destination, in one
    /// transaction. A concurrent insert of the same (source, provider id) ends as `Duplicate`.
    pub async fn insert_event(&self, event: &NewEvent<'_>) -> Result<InsertOutcome, StoreError> {
        match self {
            Self::Postgres(s) => s.insert_event(event).await,
            Self::Sqlite(s) => s.insert_event(event).await,
        }
    }

    pub async fn get_event(&self, id: EventId) -> Result<Option<StoredEvent>, StoreError> {
        match self {
            Self::Postgres(s) => s.get_event(id).await,
            Self::Sqlite(s) => s.get_event(id).await,
        }
    }

    pub async fn find_event(
        &self,
        source: &str,
        provider_event_id: &str,
    ) -> Result<Option<StoredEvent>, StoreError> {
        match self {
            Self::Postgres(s) => s.find_event(source, provider_event_id).await,
            Self::Sqlite(s) => s.find_event(source, provider_event_id).await,
        }
    }

    pub async fn jobs_for_event(&self, id: EventId) -> Result<Vec<StoredJob>, StoreError> {
        match self {
            Self::Postgres(s) => s.jobs_for_event(id).await,
            Self::Sqlite(s) => s.jobs_for_event(id).await,
        }
    }

    pub async fn count_events(&self) -> Result<i64, StoreError> {
        match self {
            Self::Postgres(s) => s.count_events().await,
            Self::Sqlite(s) => s.count_events().await,
        }
    }

    pub async fn close(&self) {
        match self {
            Self::Postgres(s) => s.close().await,
            Self::Sqlite(s) => s.close().await,
        }
    }
}

pub(crate) fn headers_from_json(text: &str) -> Result<Vec<(String, String)>, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("headers column: {e}")))
}
