//! PostgreSQL backend: for production and for several gateway processes sharing one database.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::Row;
use uuid::Uuid;

use super::{headers_from_json, InsertOutcome, NewEvent, StoreError, StoredEvent, StoredJob};
use crate::config::DatabaseConfig;
use crate::domain::{EventId, JobId};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
}

const EVENT_COLUMNS: &str = "id, tenant, source, provider_event_id, event_type, received_at, \
    content_type, headers::text AS headers, body, verified_scheme, verified_secret_index";

impl PgStore {
    pub fn connect(config: &DatabaseConfig) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(&config.url).map_err(StoreError::Database)?;
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout)
            .connect_lazy_with(options);
        Ok(Self { pool })
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub async fn insert_event(&self, e: &NewEvent<'_>) -> Result<InsertOutcome, StoreError> {
        let mut tx = self.pool.begin().await?;
        // ON CONFLICT waits for a concurrent inserter of the same key to commit or roll back,
        // so exactly one transaction creates the row and the others see it as a duplicate.
        let created: Option<Uuid> = sqlx::query_scalar(
            "INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
             content_type, headers, body, verified_scheme, verified_secret_index) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11) \
             ON CONFLICT (source, provider_event_id) DO NOTHING RETURNING id",
        )
        .bind(e.id.as_uuid())
        .bind(e.tenant.as_str())
        .bind(e.source.as_str())
        .bind(e.provider_event_id.as_str())
        .bind(e.event_type)
        .bind(e.received_at)
        .bind(e.content_type)
        .bind(&e.headers_json)
        .bind(e.body)
        .bind(e.verified_scheme)
        .bind(e.verified_secret_index)
        .fetch_optional(&mut *tx)
        .await?;

        let Some(id) = created else {
            let existing: Option<Uuid> = sqlx::query_scalar(
                "SELECT id FROM events WHERE source = $1 AND provider_event_id = $2",
            )
            .bind(e.source.as_str())
            .bind(e.provider_event_id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
            tx.rollback().await?;
            return existing
                .map(|id| InsertOutcome::Duplicate(EventId::from_uuid(id)))
                .ok_or_else(|| {
                    StoreError::Corrupt("conflicting event vanished before it could be read".into())
                });
        };

        for destination in e.destinations {
            sqlx::query(
                "INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
                 created_at, updated_at) VALUES ($1, $2, $3, 'pending', 0, $4, $4, $4)",
            )
            .bind(JobId::generate().as_uuid())
            .bind(id)
            .bind(destination.as_str())
            .bind(e.received_at)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(InsertOutcome::Created(EventId::from_uuid(id)))
    }

    pub async fn get_event(&self, id: EventId) -> Result<Option<StoredEvent>, StoreError> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id.as_uuid())
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
            "SELECT {EVENT_COLUMNS} FROM events WHERE source = $1 AND provider_event_id = $2"
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
             FROM jobs WHERE event_id = $1 ORDER BY destination",
        )
        .bind(id.as_uuid())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(StoredJob {
                    id: JobId::from_uuid(r.try_get("id")?),
                    event_id: EventId::from_uuid(r.try_get("event_id")?),
                    destination: r.try_get("destination")?,
                    status: r.try_get("status")?,
                    attempts: r.try_get("attempts")?,
                    next_attempt_at: r.try_get("next_attempt_at")?,
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

fn event_from_row(r: &PgRow) -> Result<StoredEvent, StoreError> {
    let received_at: DateTime<Utc> = r.try_get("received_at")?;
    let headers: String = r.try_get("headers")?;
    Ok(StoredEvent {
        id: EventId::from_uuid(r.try_get("id")?),
        tenant: r.try_get("tenant")?,
        source: r.try_get("source")?,
        provider_event_id: r.try_get("provider_event_id")?,
        event_type: r.try_get("event_type")?,
        received_at,
        content_type: r.try_get("content_type")?,
        headers: headers_from_json(&headers)?,
        body: r.try_get("body")?,
        verified_scheme: r.try_get("verified_scheme")?,
        verified_secret_index: r.try_get("verified_secret_index")?,
    })
}
