//! The reconciler's repair of events that have no job for a destination their source routes
//! to, one bounded step at a time. The two databases do it differently: PostgreSQL in one
//! statement, SQLite by reading without the write lock and writing only what is missing.

use chrono::{DateTime, Utc};

use super::codec::{At, Id};
use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use super::{ArrivalCursor, MissingJobsStep, Store, StoreError};
use crate::domain::JobId;

/// Reads the next `$6` events of a source after the cursor (`events_source_received_idx`
/// gives arrival order; ties on `received_at` are put in order by id, a sort of one
/// timestamp's rows at a time), creates the missing jobs among them, and returns how many it
/// created, how many it read and the last one read.
const PG_STEP: &str = "\
    WITH scanned AS ( \
        SELECT e.id, e.received_at, e.purged_at FROM events e \
        WHERE e.source = $1 AND e.received_at >= $3 AND (e.received_at, e.id) > ($3, $4) \
        ORDER BY e.received_at, e.id LIMIT $6 \
    ), created AS ( \
        INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
            created_at, updated_at) \
        SELECT gen_random_uuid(), s.id, $2, 'pending', 0, $5, $5, $5 FROM scanned s \
        WHERE s.purged_at IS NULL AND NOT EXISTS ( \
            SELECT 1 FROM jobs j WHERE j.event_id = s.id AND j.destination = $2) \
        RETURNING 1 \
    ) \
    SELECT (SELECT count(*) FROM created) AS created, \
        (SELECT count(*) FROM scanned) AS scanned, last.id, last.received_at \
    FROM (SELECT 1) one LEFT JOIN LATERAL ( \
        SELECT id, received_at FROM scanned ORDER BY received_at DESC, id DESC LIMIT 1 \
    ) last ON true";

/// The next `$5` events of a source after the cursor, each with whether it lacks its job
/// for the destination `$2` (a purged event never gets one).
const SQLITE_SCAN: &str = "\
    SELECT e.id, e.received_at, e.purged_at IS NULL AND NOT EXISTS ( \
        SELECT 1 FROM jobs j WHERE j.event_id = e.id AND j.destination = $2) AS missing \
    FROM events e WHERE e.source = $1 AND e.received_at >= $3 \
    AND (e.received_at, e.id) > ($3, $4) ORDER BY e.received_at, e.id LIMIT $5";

/// Creates the job `$1` for the event `$2` and destination `$3`, due at `$4`, unless the
/// event has it already or was purged.
const SQLITE_CREATE: &str = "\
    INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
        created_at, updated_at) \
    SELECT $1, e.id, $3, 'pending', 0, $4, $4, $4 FROM events e \
    WHERE e.id = $2 AND e.purged_at IS NULL AND NOT EXISTS ( \
        SELECT 1 FROM jobs j WHERE j.event_id = e.id AND j.destination = $3)";

impl Store {
    /// Reads the next `limit` events of `source` after `after`, in arrival order, and creates
    /// the job for `destination` of each that has none. A sweep is a series of these steps,
    /// so no statement reads more than `limit` events: on PostgreSQL a long one would hold
    /// one snapshot for the whole scan, and no dead row anywhere (the queue's among them)
    /// could be removed until it ended; on SQLite it would hold off the ingest writer.
    pub async fn create_missing_jobs(
        &self,
        source: &str,
        destination: &str,
        after: ArrivalCursor,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<MissingJobsStep, StoreError> {
        let step = Step {
            source,
            destination,
            after,
            now,
            limit,
        };
        match self {
            Self::Postgres(s) => step.postgres(s).await,
            Self::Sqlite(s) => step.sqlite(s).await,
        }
    }
}

struct Step<'a> {
    source: &'a str,
    destination: &'a str,
    after: ArrivalCursor,
    now: DateTime<Utc>,
    limit: i64,
}

impl Step<'_> {
    async fn postgres(&self, s: &PgStore) -> Result<MissingJobsStep, StoreError> {
        let (created, scanned, last_id, last_at): (i64, i64, Option<Id>, Option<At>) =
            sqlx::query_as(PG_STEP)
                .bind(self.source)
                .bind(self.destination)
                .bind(At(self.after.received_at))
                .bind(Id::from(self.after.event))
                .bind(At(self.now))
                .bind(self.limit)
                .fetch_one(&s.pool)
                .await?;
        let last = last_id.zip(last_at).map(|(id, at)| ArrivalCursor {
            received_at: at.0,
            event: id.into(),
        });
        Ok(MissingJobsStep::after_reading(
            created as u64,
            scanned,
            self.limit,
            last,
        ))
    }

    /// The events are read without the write lock (a WAL reader does not hold off the ingest
    /// writer), and the lock is taken only when some job is missing, which outside a change
    /// of routing is never. Under the lock each insert checks again, so two sweeping
    /// processes cannot both create the same job, and a purged event gets none.
    async fn sqlite(&self, s: &SqliteStore) -> Result<MissingJobsStep, StoreError> {
        let rows: Vec<(Id, At, bool)> = sqlx::query_as(SQLITE_SCAN)
            .bind(self.source)
            .bind(self.destination)
            .bind(At(self.after.received_at))
            .bind(Id::from(self.after.event))
            .bind(self.limit)
            .fetch_all(&s.pool)
            .await?;
        let last = rows.last().map(|&(id, at, _)| ArrivalCursor {
            received_at: at.0,
            event: id.into(),
        });
        let missing: Vec<Id> = rows.iter().filter(|r| r.2).map(|r| r.0).collect();
        let mut created = 0;
        if !missing.is_empty() {
            let (mut conn, _turn) = s.write_connection().await?;
            let mut tx = sqlx::Connection::begin_with(&mut *conn, "BEGIN IMMEDIATE").await?;
            for event_id in missing {
                created += sqlx::query(SQLITE_CREATE)
                    .bind(Id::from(JobId::generate()))
                    .bind(event_id)
                    .bind(self.destination)
                    .bind(At(self.now))
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            tx.commit().await?;
        }
        Ok(MissingJobsStep::after_reading(
            created,
            rows.len() as i64,
            self.limit,
            last,
        ))
    }
}
