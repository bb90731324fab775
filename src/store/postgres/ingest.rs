//! PostgreSQL: ingest's group commit, one statement per batch.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use super::{PgStore, JOBS_CHANNEL};
use crate::domain::{EventId, JobId};
use crate::store::{batch, InsertOutcome, NewEvent, StoreError};

/// Group commit's one statement. Jobs come pre-built for every event in the batch and are
/// kept only for the events this statement created; the notification is sent only when a
/// job was.
const INSERT_BATCH_SQL: &str = "\
    WITH created AS ( \
        INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
            content_type, headers, body, verified_scheme, verified_secret_index) \
        SELECT id, tenant, source, pid, etype, rat, ctype, h::jsonb, body, scheme, idx \
        FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], \
            $6::timestamptz[], $7::text[], $8::text[], $9::bytea[], $10::text[], $11::int4[]) \
            AS t(id, tenant, source, pid, etype, rat, ctype, h, body, scheme, idx) \
        ON CONFLICT (source, provider_event_id) DO NOTHING RETURNING id \
    ), queued AS ( \
        INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
            created_at, updated_at) \
        SELECT j.id, j.event_id, j.destination, 'pending', 0, j.t, j.t, j.t \
        FROM UNNEST($12::uuid[], $13::uuid[], $14::text[], $15::timestamptz[]) \
            AS j(id, event_id, destination, t) \
        WHERE j.event_id IN (SELECT id FROM created) \
        RETURNING 1 \
    ), notified AS ( \
        SELECT pg_notify($16, '') FROM (SELECT 1 FROM queued LIMIT 1) q \
    ) \
    SELECT c.id FROM created c LEFT JOIN notified ON true";

impl PgStore {
    /// Writes a batch as one statement, so one implicit transaction and one round trip: the
    /// events (ON CONFLICT waits for a concurrent inserter of the same key, so exactly one
    /// transaction creates a row), the jobs of the events it created, and the wake-up for
    /// listening workers, which PostgreSQL delivers only if the statement commits. The
    /// statement's answer arrives after its commit is durable (`synchronous_commit`).
    pub async fn insert_events(
        &self,
        events: &[NewEvent<'_>],
    ) -> Result<Vec<InsertOutcome>, StoreError> {
        let (uniques, slot) = batch::dedupe(events);
        let rows: Vec<&NewEvent<'_>> = uniques.iter().map(|&i| &events[i]).collect();
        let (mut job_ids, mut job_events, mut job_destinations, mut job_times) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for e in &rows {
            for d in e.destinations {
                job_ids.push(JobId::generate().as_uuid());
                job_events.push(e.id.as_uuid());
                job_destinations.push(d.as_str());
                job_times.push(e.received_at);
            }
        }
        let created: Vec<Uuid> = sqlx::query_scalar(INSERT_BATCH_SQL)
            .bind(rows.iter().map(|e| e.id.as_uuid()).collect::<Vec<_>>())
            .bind(rows.iter().map(|e| e.tenant.as_str()).collect::<Vec<_>>())
            .bind(rows.iter().map(|e| e.source.as_str()).collect::<Vec<_>>())
            .bind(
                rows.iter()
                    .map(|e| e.provider_event_id.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(rows.iter().map(|e| e.event_type).collect::<Vec<_>>())
            .bind(rows.iter().map(|e| e.received_at).collect::<Vec<_>>())
            .bind(rows.iter().map(|e| e.content_type).collect::<Vec<_>>())
            .bind(
                rows.iter()
                    .map(|e| e.headers_json.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(rows.iter().map(|e| e.body).collect::<Vec<_>>())
            .bind(rows.iter().map(|e| e.verified_scheme).collect::<Vec<_>>())
            .bind(
                rows.iter()
                    .map(|e| e.verified_secret_index)
                    .collect::<Vec<_>>(),
            )
            .bind(job_ids)
            .bind(job_events)
            .bind(job_destinations)
            .bind(job_times)
            .bind(JOBS_CHANNEL)
            .fetch_all(&self.pool)
            .await?;
        let created: HashSet<Uuid> = created.into_iter().collect();

        // Copies of events stored earlier (or by a concurrent batch that won the key): read
        // after the insert committed, so the winner's row is visible.
        let conflicted: Vec<&NewEvent<'_>> = rows
            .iter()
            .copied()
            .filter(|e| !created.contains(&e.id.as_uuid()))
            .collect();
        let mut existing: HashMap<(&str, &str), Uuid> = HashMap::new();
        let found: Vec<(Uuid, String, String)> = if conflicted.is_empty() {
            Vec::new()
        } else {
            sqlx::query_as(
                "SELECT e.id, e.source, e.provider_event_id FROM events e \
                 JOIN UNNEST($1::text[], $2::text[]) AS k(source, pid) \
                 ON e.source = k.source AND e.provider_event_id = k.pid",
            )
            .bind(
                conflicted
                    .iter()
                    .map(|e| e.source.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                conflicted
                    .iter()
                    .map(|e| e.provider_event_id.as_str())
                    .collect::<Vec<_>>(),
            )
            .fetch_all(&self.pool)
            .await?
        };
        for (id, s, p) in &found {
            existing.insert((s.as_str(), p.as_str()), *id);
        }
        let outcomes = rows
            .iter()
            .map(|e| {
                if created.contains(&e.id.as_uuid()) {
                    return Ok(InsertOutcome::Created(e.id));
                }
                let key = (e.source.as_str(), e.provider_event_id.as_str());
                let id = existing.get(&key).ok_or_else(|| {
                    StoreError::Corrupt("conflicting event vanished before it could be read".into())
                })?;
                Ok(InsertOutcome::Duplicate(EventId::from_uuid(*id)))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(batch::answers(&uniques, &slot, &outcomes))
    }
}
