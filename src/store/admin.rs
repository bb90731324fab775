//! The admin side of `Store`: listing, replay and dead letters, one statement text for both
//! databases.

use chrono::{DateTime, Utc};

use super::codec::{At, Id};
use super::rows::{EventRow, JobRow, SummaryRow, EVENT_COLUMNS, JOB_COLUMNS, SUMMARY_COLUMNS};
use super::{
    admin_sql, codec, BulkProgress, DeadLetterFilter, EventFilter, EventSummary, JobFromEventSql,
    JobWithEvent, NewJob, PageCursor, ProgressKey, ReplayRouting, SavedResponse, Store, StoreError,
    StoredEvent, StoredJob,
};
use crate::domain::JobId;

/// A dead letter's row: the job's columns and its event's summary.
#[derive(sqlx::FromRow)]
struct JobWithEventRow {
    #[sqlx(flatten)]
    job: JobRow,
    #[sqlx(flatten)]
    event: SummaryRow,
}

impl TryFrom<JobWithEventRow> for JobWithEvent {
    type Error = StoreError;

    fn try_from(r: JobWithEventRow) -> Result<Self, StoreError> {
        Ok(Self {
            job: StoredJob::try_from(r.job)?,
            event: r.event.into(),
        })
    }
}

/// Inserts one pending job, due now, if its event is still stored: retention's batch skips
/// the event the statement locks (`job_from_event_sql!`), and a job inserted after retention
/// deleted its event finds no row and inserts nothing.
macro_rules! insert_job {
    ($self:ident, $tx:ident, $job:expr, $now:expr) => {
        sqlx::query(INSERT_JOB.for_store($self))
            .bind(Id::from($job.id))
            .bind(Id::from($job.event_id))
            .bind(&$job.destination)
            .bind(At($now))
            .bind($job.ordering.as_ref().map(|o| o.key.as_str()))
            .bind($job.ordering.as_ref().is_some_and(|o| o.hold))
            .execute(&mut *$tx)
            .await?
    };
}

const INSERT_JOB: JobFromEventSql = job_from_event_sql!(
    "INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
     created_at, updated_at, ordering_key, ordering_hold) \
     SELECT $1, e.id, $3, 'pending', 0, $4, $4, $4, $5, $6 FROM events e \
     WHERE e.id = $2"
);

impl Store {
    /// Events of the filter's tenant, newest first, after the keyset position `after`.
    pub async fn list_events(
        &self,
        filter: &EventFilter,
        after: Option<PageCursor>,
        limit: i64,
    ) -> Result<Vec<EventSummary>, StoreError> {
        filter.check()?;
        let built = admin_sql::list_events(filter, after, limit);
        let rows: Vec<SummaryRow> = dispatch_listing!(self, pool =>
            bind_built!(sqlx::query_as(&built.sql), built).fetch_all(pool).await?);
        Ok(rows.into_iter().map(EventSummary::from).collect())
    }

    pub async fn count_matching_events(&self, filter: &EventFilter) -> Result<i64, StoreError> {
        filter.check()?;
        let built = admin_sql::count_events(filter);
        Ok(dispatch_listing!(self, pool =>
            bind_built!(sqlx::query_scalar(&built.sql), built).fetch_one(pool).await?))
    }

    pub async fn list_dead_letters(
        &self,
        filter: &DeadLetterFilter,
        after: Option<PageCursor>,
        limit: i64,
    ) -> Result<Vec<JobWithEvent>, StoreError> {
        filter.check()?;
        let built = admin_sql::list_dead_letters(filter, after, limit);
        let rows: Vec<JobWithEventRow> = dispatch_listing!(self, pool =>
            bind_built!(sqlx::query_as(&built.sql), built).fetch_all(pool).await?);
        rows.into_iter().map(JobWithEvent::try_from).collect()
    }

    /// The job with its event, if the event belongs to `tenant`.
    pub async fn find_job(
        &self,
        job: JobId,
        tenant: &str,
    ) -> Result<Option<JobWithEvent>, StoreError> {
        let sql = format!(
            "SELECT {JOB_COLUMNS}, {SUMMARY_COLUMNS} FROM jobs j JOIN events e \
             ON e.id = j.event_id WHERE j.id = $1 AND e.tenant = $2"
        );
        let row: Option<JobWithEventRow> = dispatch!(self, s => sqlx::query_as(&sql)
            .bind(Id::from(job))
            .bind(tenant)
            .fetch_optional(&s.pool)
            .await?);
        row.map(JobWithEvent::try_from).transpose()
    }

    /// Creates pending jobs and, in the same transaction, saves the idempotent response.
    pub async fn create_jobs(
        &self,
        jobs: &[NewJob],
        now: DateTime<Utc>,
        save: Option<&SavedResponse<'_>>,
    ) -> Result<(), StoreError> {
        in_write_tx!(self, tx => {
            for job in jobs {
                insert_job!(self, tx, job, now);
            }
            if let Some(save) = save {
                save_response!(tx, save, now);
            }
        });
        self.wake_workers();
        Ok(())
    }

    /// One committed batch of a bulk replay: one new job per destination that `routes` sends
    /// each event matching `filter` after `progress.after` to. Commits the batch with the
    /// progress.
    pub async fn replay_events_batch(
        &self,
        filter: &EventFilter,
        progress: BulkProgress,
        limit: i64,
        routes: &dyn ReplayRouting,
        now: DateTime<Utc>,
        key: Option<ProgressKey<'_>>,
    ) -> Result<BulkProgress, StoreError> {
        filter.check()?;
        let built = admin_sql::list_events(filter, progress.after, limit);
        let next = in_write_tx!(self, tx => {
            let rows: Vec<SummaryRow> =
                bind_built!(sqlx::query_as(&built.sql), built).fetch_all(&mut *tx).await?;
            let events: Vec<EventSummary> = rows.into_iter().map(EventSummary::from).collect();
            for event in &events {
                let destinations = match routes.fixed(&event.source) {
                    Some(fixed) => fixed.into_iter().map(|d| (d, None)).collect(),
                    None => {
                        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE id = $1");
                        let row: Option<EventRow> = sqlx::query_as(&sql)
                            .bind(Id::from(event.id))
                            .fetch_optional(&mut *tx)
                            .await?;
                        match row {
                            Some(row) => routes.route_ordered(&StoredEvent::try_from(row)?),
                            None => Vec::new(),
                        }
                    }
                };
                for (destination, ordering) in destinations {
                    let job = NewJob {
                        id: JobId::for_event(event.id),
                        event_id: event.id,
                        destination,
                        ordering,
                    };
                    insert_job!(self, tx, job, now);
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
                save_progress!(tx, key, &next, now);
            }
            next
        });
        self.wake_workers();
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
        in_write_tx!(self, tx => {
            let done = sqlx::query(
                "UPDATE jobs SET status = 'pending', attempts = 0, next_attempt_at = $1, \
                 updated_at = $1 WHERE id = $2 AND status = 'failed' AND discarded_at IS NULL \
                 AND event_id IN (SELECT id FROM events WHERE tenant = $3)",
            )
            .bind(At(now))
            .bind(Id::from(job))
            .bind(tenant)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() != 1 {
                tx.rollback().await?;
                return Ok(false);
            }
            if let Some(save) = save {
                save_response!(tx, save, now);
            }
        });
        self.wake_workers();
        Ok(true)
    }

    /// One committed batch of a bulk dead-letter retry.
    pub async fn retry_dead_letters_batch(
        &self,
        filter: &DeadLetterFilter,
        progress: BulkProgress,
        limit: i64,
        now: DateTime<Utc>,
        key: Option<ProgressKey<'_>>,
    ) -> Result<BulkProgress, StoreError> {
        filter.check()?;
        let built = admin_sql::retry_dead_letters(filter, now, limit);
        let next = in_write_tx!(self, tx => {
            let n = bind_built!(sqlx::query(&built.sql), built)
                .execute(&mut *tx)
                .await?
                .rows_affected() as i64;
            let next = BulkProgress {
                after: None,
                done: progress.done + n,
            };
            if let Some(key) = key {
                save_progress!(tx, key, &next, now);
            }
            next
        });
        self.wake_workers();
        Ok(next)
    }

    /// Discards up to `limit` dead letters matching `filter`; returns how many.
    pub async fn discard_dead_letters_batch(
        &self,
        filter: &DeadLetterFilter,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        filter.check()?;
        let built = admin_sql::discard_dead_letters(filter, now, limit);
        Ok(
            dispatch!(self, s => bind_built!(sqlx::query(&built.sql), built)
            .execute(&s.pool)
            .await?
            .rows_affected()),
        )
    }

    pub async fn discard_dead_letter(
        &self,
        job: JobId,
        tenant: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "UPDATE jobs SET discarded_at = $1, updated_at = $1 WHERE id = $2 \
            AND status = 'failed' AND discarded_at IS NULL \
            AND event_id IN (SELECT id FROM events WHERE tenant = $3)";
        let done = dispatch!(self, s => sqlx::query(SQL)
            .bind(At(now))
            .bind(Id::from(job))
            .bind(tenant)
            .execute(&s.pool)
            .await?
            .rows_affected());
        Ok(done == 1)
    }
}
