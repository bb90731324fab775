//! PostgreSQL: the reconciler's repair of events that have no job for a destination their
//! source routes to, one bounded step at a time.

use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

use super::PgStore;
use crate::domain::EventId;
use crate::store::{ArrivalCursor, MissingJobsStep, StoreError};

/// Reads the next `$6` events of a source after the cursor (`events_source_received_idx`
/// gives arrival order; ties on `received_at` are put in order by id, a sort of one
/// timestamp's rows at a time), creates the missing jobs among them, and returns how many it
/// created, how many it read and the last one read.
const STEP_SQL: &str = "\
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

impl PgStore {
    pub async fn create_missing_jobs(
        &self,
        source: &str,
        destination: &str,
        after: ArrivalCursor,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<MissingJobsStep, StoreError> {
        let row = sqlx::query(STEP_SQL)
            .bind(source)
            .bind(destination)
            .bind(after.received_at)
            .bind(after.event.as_uuid())
            .bind(now)
            .bind(limit)
            .fetch_one(&self.pool)
            .await?;
        let created: i64 = row.try_get("created")?;
        let scanned: i64 = row.try_get("scanned")?;
        let last_id: Option<Uuid> = row.try_get("id")?;
        let last_at: Option<DateTime<Utc>> = row.try_get("received_at")?;
        let last = last_id.zip(last_at).map(|(id, received_at)| ArrivalCursor {
            received_at,
            event: EventId::from_uuid(id),
        });
        Ok(MissingJobsStep::after_reading(
            created as u64,
            scanned,
            limit,
            last,
        ))
    }
}
