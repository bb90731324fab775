//! SQLite: the admin API's queries and actions, and Idempotency-Key records.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Connection, Row, Sqlite, Transaction};

use super::{from_millis, job_from_row, millis, parse_uuid, SqliteStore};
use crate::domain::{EventId, JobId};
use crate::store::admin_sql::{self, Arg, Built, Dialect};
use crate::store::{
    BulkProgress, DeadLetterFilter, EventFilter, EventSummary, IdempotencyBegin, JobWithEvent,
    NewJob, PageCursor, ProgressKey, SavedResponse, StoreError,
};

type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments<'q>>;

fn bind<'q>(built: &'q Built) -> SqliteQuery<'q> {
    built
        .args
        .iter()
        .fold(sqlx::query(&built.sql), |q, a| match a {
            Arg::Text(s) => q.bind(s.as_str()),
            Arg::Time(t) => q.bind(millis(*t)),
            Arg::Id(u) => q.bind(u.to_string()),
            Arg::Int(i) => q.bind(*i),
        })
}

fn summary_from_row(r: &SqliteRow) -> Result<EventSummary, StoreError> {
    let id: String = r.try_get("e_id")?;
    Ok(EventSummary {
        id: EventId::from_uuid(parse_uuid(&id)?),
        tenant: r.try_get("e_tenant")?,
        source: r.try_get("e_source")?,
        provider_event_id: r.try_get("e_provider_event_id")?,
        event_type: r.try_get("e_event_type")?,
        received_at: from_millis(r.try_get("e_received_at")?)?,
        verified_secret_index: r.try_get("e_verified_secret_index")?,
    })
}

impl SqliteStore {
    pub async fn list_events(
        &self,
        filter: &EventFilter,
        after: Option<PageCursor>,
        limit: i64,
    ) -> Result<Vec<EventSummary>, StoreError> {
        let built = admin_sql::list_events(Dialect::Sqlite, filter, after, limit);
        let rows = bind(&built).fetch_all(&self.pool).await?;
        rows.iter().map(summary_from_row).collect()
    }

    pub async fn count_matching_events(&self, filter: &EventFilter) -> Result<i64, StoreError> {
        let built = admin_sql::count_events(Dialect::Sqlite, filter);
        Ok(bind(&built).fetch_one(&self.pool).await?.try_get(0)?)
    }

    pub async fn list_dead_letters(
        &self,
        filter: &DeadLetterFilter,
        after: Option<PageCursor>,
        limit: i64,
    ) -> Result<Vec<JobWithEvent>, StoreError> {
        let built = admin_sql::list_dead_letters(Dialect::Sqlite, filter, after, limit);
        let rows = bind(&built).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
                Ok(JobWithEvent {
                    job: job_from_row(r)?,
                    event: summary_from_row(r)?,
                })
            })
            .collect()
    }

    pub async fn find_job(
        &self,
        job: JobId,
        tenant: &str,
    ) -> Result<Option<JobWithEvent>, StoreError> {
        let sql = format!(
            "SELECT {}, {} FROM jobs j JOIN events e ON e.id = j.event_id \
             WHERE j.id = ?1 AND e.tenant = ?2",
            admin_sql::JOB_COLUMNS_J,
            admin_sql::SUMMARY_COLUMNS
        );
        let row = sqlx::query(&sql)
            .bind(job.to_string())
            .bind(tenant)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| {
            Ok(JobWithEvent {
                job: job_from_row(&r)?,
                event: summary_from_row(&r)?,
            })
        })
        .transpose()
    }

    pub async fn create_jobs(
        &self,
        jobs: &[NewJob],
        now: DateTime<Utc>,
        save: Option<&SavedResponse<'_>>,
    ) -> Result<(), StoreError> {
        let (mut conn, _turn) = self.write_connection().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        for job in jobs {
            insert_job(&mut tx, job, now).await?;
        }
        if let Some(save) = save {
            save_response(&mut tx, save, now).await?;
        }
        tx.commit().await?;
        self.job_signal.notify_one();
        Ok(())
    }

    /// Replays one batch of the events matching `filter` after `progress.after`: one new
    /// job per destination its source routes to. Commits the batch with the progress.
    pub async fn replay_events_batch(
        &self,
        filter: &EventFilter,
        progress: BulkProgress,
        limit: i64,
        routes: &BTreeMap<String, Vec<String>>,
        now: DateTime<Utc>,
        key: Option<ProgressKey<'_>>,
    ) -> Result<BulkProgress, StoreError> {
        let (mut conn, _turn) = self.write_connection().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let built = admin_sql::list_events(Dialect::Sqlite, filter, progress.after, limit);
        let events = bind(&built)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(summary_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        for event in &events {
            for destination in routes.get(&event.source).into_iter().flatten() {
                let job = NewJob {
                    id: JobId::generate(),
                    event_id: event.id,
                    destination: destination.clone(),
                };
                insert_job(&mut tx, &job, now).await?;
            }
        }
        let next = BulkProgress {
            after: events.last().map(|e| PageCursor {
                at: e.received_at,
                id: e.id.as_uuid(),
            }),
            done: progress.done + events.len() as i64,
        };
        if let Some(key) = key {
            save_progress(&mut tx, key, &next, now).await?;
        }
        tx.commit().await?;
        self.job_signal.notify_one();
        Ok(BulkProgress {
            after: next.after.or(progress.after),
            ..next
        })
    }

    /// Puts one dead letter back to `pending` with a fresh schedule; false if it is not one.
    pub async fn retry_dead_letter(
        &self,
        job: JobId,
        tenant: &str,
        now: DateTime<Utc>,
        save: Option<&SavedResponse<'_>>,
    ) -> Result<bool, StoreError> {
        let (mut conn, _turn) = self.write_connection().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let done = sqlx::query(
            "UPDATE jobs SET status = 'pending', attempts = 0, next_attempt_at = ?1, \
             updated_at = ?1 WHERE id = ?2 AND status = 'failed' AND discarded_at IS NULL \
             AND event_id IN (SELECT id FROM events WHERE tenant = ?3)",
        )
        .bind(millis(now))
        .bind(job.to_string())
        .bind(tenant)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        if let Some(save) = save {
            save_response(&mut tx, save, now).await?;
        }
        tx.commit().await?;
        self.job_signal.notify_one();
        Ok(true)
    }

    pub async fn retry_dead_letters_batch(
        &self,
        filter: &DeadLetterFilter,
        progress: BulkProgress,
        limit: i64,
        now: DateTime<Utc>,
        key: Option<ProgressKey<'_>>,
    ) -> Result<BulkProgress, StoreError> {
        let (mut conn, _turn) = self.write_connection().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let built = admin_sql::retry_dead_letters(Dialect::Sqlite, filter, now, limit);
        let n = bind(&built).execute(&mut *tx).await?.rows_affected() as i64;
        let next = BulkProgress {
            after: None,
            done: progress.done + n,
        };
        if let Some(key) = key {
            save_progress(&mut tx, key, &next, now).await?;
        }
        tx.commit().await?;
        self.job_signal.notify_one();
        Ok(next)
    }

    pub async fn discard_dead_letters_batch(
        &self,
        filter: &DeadLetterFilter,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let built = admin_sql::discard_dead_letters(Dialect::Sqlite, filter, now, limit);
        Ok(bind(&built).execute(&self.pool).await?.rows_affected())
    }

    pub async fn discard_dead_letter(
        &self,
        job: JobId,
        tenant: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE jobs SET discarded_at = ?1, updated_at = ?1 WHERE id = ?2 \
             AND status = 'failed' AND discarded_at IS NULL \
             AND event_id IN (SELECT id FROM events WHERE tenant = ?3)",
        )
        .bind(millis(now))
        .bind(job.to_string())
        .bind(tenant)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn idempotency_begin(
        &self,
        tenant: &str,
        key: &str,
        request_hash: &str,
        now: DateTime<Utc>,
        stale_before: DateTime<Utc>,
    ) -> Result<IdempotencyBegin, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO idempotency_keys (tenant, idempotency_key, request_hash, state, \
             created_at, updated_at) VALUES (?1, ?2, ?3, 'started', ?4, ?4) \
             ON CONFLICT (tenant, idempotency_key) DO NOTHING",
        )
        .bind(tenant)
        .bind(key)
        .bind(request_hash)
        .bind(millis(now))
        .execute(&self.pool)
        .await?;
        if inserted.rows_affected() == 1 {
            return Ok(IdempotencyBegin::Proceed { progress: None });
        }
        let row = sqlx::query(
            "SELECT request_hash, state, status_code, response_body, progress, updated_at \
             FROM idempotency_keys WHERE tenant = ?1 AND idempotency_key = ?2",
        )
        .bind(tenant)
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            // Swept between the two statements: nothing is running under this key.
            return Ok(IdempotencyBegin::InProgress);
        };
        let updated_at = from_millis(row.try_get("updated_at")?)?;
        let record = crate::store::idempotency::Record {
            request_hash: row.try_get("request_hash")?,
            state: row.try_get("state")?,
            status_code: row.try_get("status_code")?,
            response_body: row.try_get("response_body")?,
            progress: row.try_get("progress")?,
        };
        let verdict = record.verdict(request_hash, updated_at < stale_before)?;
        if let IdempotencyBegin::Proceed { .. } = verdict {
            // Reclaim the abandoned record, unless another request just did.
            let claimed = sqlx::query(
                "UPDATE idempotency_keys SET updated_at = ?1 WHERE tenant = ?2 \
                 AND idempotency_key = ?3 AND state = 'started' AND updated_at = ?4",
            )
            .bind(millis(now))
            .bind(tenant)
            .bind(key)
            .bind(millis(updated_at))
            .execute(&self.pool)
            .await?;
            if claimed.rows_affected() != 1 {
                return Ok(IdempotencyBegin::InProgress);
            }
        }
        Ok(verdict)
    }

    pub async fn idempotency_save(
        &self,
        save: &SavedResponse<'_>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let (mut conn, _turn) = self.write_connection().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        save_response(&mut tx, save, now).await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn idempotency_release(&self, tenant: &str, key: &str) -> Result<(), StoreError> {
        sqlx::query(
            "DELETE FROM idempotency_keys WHERE tenant = ?1 AND idempotency_key = ?2 \
             AND state = 'started'",
        )
        .bind(tenant)
        .bind(key)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn sweep_idempotency(
        &self,
        created_before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM idempotency_keys WHERE (tenant, idempotency_key) IN ( \
             SELECT tenant, idempotency_key FROM idempotency_keys WHERE created_at < ?1 LIMIT ?2)",
        )
        .bind(millis(created_before))
        .bind(limit)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}

async fn insert_job(
    tx: &mut Transaction<'_, Sqlite>,
    job: &NewJob,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
         created_at, updated_at) VALUES (?1, ?2, ?3, 'pending', 0, ?4, ?4, ?4)",
    )
    .bind(job.id.to_string())
    .bind(job.event_id.to_string())
    .bind(&job.destination)
    .bind(millis(now))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn save_response(
    tx: &mut Transaction<'_, Sqlite>,
    save: &SavedResponse<'_>,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE idempotency_keys SET state = 'completed', status_code = ?1, \
         response_body = ?2, progress = NULL, updated_at = ?3 \
         WHERE tenant = ?4 AND idempotency_key = ?5",
    )
    .bind(i32::from(save.status))
    .bind(save.body)
    .bind(millis(now))
    .bind(save.tenant)
    .bind(save.key)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn save_progress(
    tx: &mut Transaction<'_, Sqlite>,
    key: ProgressKey<'_>,
    progress: &BulkProgress,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE idempotency_keys SET progress = ?1, updated_at = ?2 \
         WHERE tenant = ?3 AND idempotency_key = ?4",
    )
    .bind(serde_json::to_string(progress).expect("progress serialises"))
    .bind(millis(now))
    .bind(key.tenant)
    .bind(key.key)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
