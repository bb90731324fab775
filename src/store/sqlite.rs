//! SQLite backend: the embedded default. WAL mode with `synchronous = FULL`, so a commit
//! survives a process crash and a power loss; writers queue on the write lock (busy timeout).

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::Row;

use super::{headers_from_json, InsertOutcome, NewEvent, StoreError, StoredEvent, StoredJob};
use crate::config::DatabaseConfig;
use crate::domain::{EventId, JobId};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

const EVENT_COLUMNS: &str = "id, tenant, source, provider_event_id, event_type, received_at, \
    content_type, headers, body, verified_scheme, verified_secret_index";

fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn from_millis(ms: i64) -> Result<DateTime<Utc>, StoreError> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| StoreError::Corrupt(format!("timestamp {ms} out of range")))
}

fn parse_uuid(s: &str) -> Result<uuid::Uuid, StoreError> {
    uuid::Uuid::parse_str(s).map_err(|_| StoreError::Corrupt(format!("bad uuid {s:?}")))
}

impl SqliteStore {
    pub fn connect(config: &DatabaseConfig) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(&config.url)
            .map_err(StoreError::Database)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(config.busy_timeout)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout)
            .connect_lazy_with(options);
        Ok(Self { pool })
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    /// Takes and releases the write lock: with SQLite, "can store" means "can get that lock".
    pub async fn ping(&self) -> Result<(), StoreError> {
        let tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        tx.rollback().await?;
        Ok(())
    }

    pub async fn insert_event(&self, e: &NewEvent<'_>) -> Result<InsertOutcome, StoreError> {
        // IMMEDIATE takes the write lock up front, so the transaction never has to upgrade a
        // read lock (which SQLite may refuse with SQLITE_BUSY without waiting).
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let id = e.id.to_string();
        let created: Option<String> = sqlx::query_scalar(
            "INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
             content_type, headers, body, verified_scheme, verified_secret_index) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (source, provider_event_id) DO NOTHING RETURNING id",
        )
        .bind(&id)
        .bind(e.tenant.as_str())
        .bind(e.source.as_str())
        .bind(e.provider_event_id.as_str())
        .bind(e.event_type)
        .bind(millis(e.received_at))
        .bind(e.content_type)
        .bind(&e.headers_json)
        .bind(e.body)
        .bind(e.verified_scheme)
        .bind(e.verified_secret_index)
        .fetch_optional(&mut *tx)
        .await?;

        if created.is_none() {
            let existing: Option<String> = sqlx::query_scalar(
                "SELECT id FROM events WHERE source = ? AND provider_event_id = ?",
            )
            .bind(e.source.as_str())
            .bind(e.provider_event_id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
            tx.rollback().await?;
            let existing = existing.ok_or_else(|| {
                StoreError::Corrupt("conflicting event vanished before it could be read".into())
            })?;
            return Ok(InsertOutcome::Duplicate(EventId::from_uuid(parse_uuid(
                &existing,
            )?)));
        }

        let now = millis(e.received_at);
        for destination in e.destinations {
            sqlx::query(
                "INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
                 created_at, updated_at) VALUES (?, ?, ?, 'pending', 0, ?, ?, ?)",
            )
            .bind(JobId::generate().to_string())
            .bind(&id)
            .bind(destination.as_str())
            .bind(now)
            .bind(now)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(InsertOutcome::Created(e.id))
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
        let rows = sqlx::query(
            "SELECT id, event_id, destination, status, attempts, next_attempt_at, last_error \
             FROM jobs WHERE event_id = ? ORDER BY destination",
        )
        .bind(id.to_string())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get("id")?;
                let event_id: String = r.try_get("event_id")?;
                Ok(StoredJob {
                    id: JobId::from_uuid(parse_uuid(&id)?),
                    event_id: EventId::from_uuid(parse_uuid(&event_id)?),
                    destination: r.try_get("destination")?,
                    status: r.try_get("status")?,
                    attempts: r.try_get("attempts")?,
                    next_attempt_at: from_millis(r.try_get("next_attempt_at")?)?,
                    last_error: r.try_get("last_error")?,
                })
            })
            .collect()
    }

    pub async fn count_events(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM events")
            .fetch_one(&self.pool)
            .await?)
    }

    pub async fn close(&self) {
        self.pool.close().await;
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
