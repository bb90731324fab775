//! PostgreSQL: ingest's group commit, one statement per batch.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use uuid::Uuid;

use super::{PgStore, JOBS_CHANNEL};
use crate::domain::{EventId, JobId};
use crate::store::{batch, InsertOutcome, NewEvent, StoreError};

/// Group commit's one statement. Jobs come pre-built for every event in the batch and are
/// kept only for the events this statement created; the notification is sent only when a
/// job was. `{on_conflict}` is empty on the fast path (see `insert_events`).
macro_rules! insert_batch_sql {
    ($on_conflict:literal) => {
        concat!(
            "\
    WITH created AS ( \
        INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
            content_type, headers, body, verified_scheme, verified_secret_index) \
        SELECT id, tenant, source, pid, etype, rat, ctype, h::jsonb, body, scheme, idx \
        FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], \
            $6::timestamptz[], $7::text[], $8::text[], $9::bytea[], $10::text[], $11::int4[]) \
            AS t(id, tenant, source, pid, etype, rat, ctype, h, body, scheme, idx) \
        ",
            $on_conflict,
            " RETURNING id \
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
    SELECT c.id FROM created c LEFT JOIN notified ON true"
        )
    };
}

/// Plain inserts: any copy of a stored event makes the whole statement fail (23505).
const INSERT_BATCH_FAST_SQL: &str = insert_batch_sql!("");
/// ON CONFLICT waits for a concurrent inserter of the same key, so exactly one transaction
/// creates a row, and skips copies of stored events.
const INSERT_BATCH_SQL: &str =
    insert_batch_sql!("ON CONFLICT (source, provider_event_id) DO NOTHING");

impl PgStore {
    /// Writes a batch as one statement, so one implicit transaction and one round trip: the
    /// events, the jobs of the events it created, and the wake-up for listening workers,
    /// which PostgreSQL delivers only if the statement commits. The statement's answer
    /// arrives after its commit is durable (`synchronous_commit`).
    ///
    /// Copies of stored events are rare (a provider's retry), so a batch first goes in with
    /// plain inserts, which cost PostgreSQL less than ON CONFLICT's speculative insertion. If
    /// any event in it is already stored, the unique index rejects the whole statement, nothing
    /// of it is written, and the batch goes again with ON CONFLICT DO NOTHING, which decides
    /// exactly as before. After such a batch the next ones use ON CONFLICT directly until one
    /// meets no copy, so a burst of retries does not pay twice per batch.
    pub async fn insert_events(
        &self,
        events: &[NewEvent<'_>],
    ) -> Result<Vec<InsertOutcome>, StoreError> {
        let (uniques, slot) = batch::dedupe(events);
        let rows: Vec<&NewEvent<'_>> = uniques.iter().map(|&i| &events[i]).collect();
        let jobs = BatchJobs::for_events(&rows);
        let saw_copies = &self.ingest_saw_copies;
        let created: Vec<Uuid> = if saw_copies.load(Ordering::Relaxed) {
            let created = self.insert_batch(INSERT_BATCH_SQL, &rows, &jobs).await?;
            if created.len() == rows.len() {
                saw_copies.store(false, Ordering::Relaxed);
            }
            created
        } else {
            match self.insert_batch(INSERT_BATCH_FAST_SQL, &rows, &jobs).await {
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                    saw_copies.store(true, Ordering::Relaxed);
                    self.insert_batch(INSERT_BATCH_SQL, &rows, &jobs).await?
                }
                other => other?,
            }
        };
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

/// One job per destination for each event of a batch, as the statement's arrays. Built once:
/// a batch that goes again after a rejected fast path reuses them (nothing of it was written).
struct BatchJobs<'a> {
    ids: Vec<Uuid>,
    events: Vec<Uuid>,
    destinations: Vec<&'a str>,
    times: Vec<chrono::DateTime<chrono::Utc>>,
}

impl<'a> BatchJobs<'a> {
    fn for_events(rows: &[&'a NewEvent<'a>]) -> Self {
        let mut jobs = BatchJobs {
            ids: Vec::new(),
            events: Vec::new(),
            destinations: Vec::new(),
            times: Vec::new(),
        };
        for e in rows {
            for d in e.destinations {
                jobs.ids.push(JobId::generate().as_uuid());
                jobs.events.push(e.id.as_uuid());
                jobs.destinations.push(d.as_str());
                jobs.times.push(e.received_at);
            }
        }
        jobs
    }
}

impl PgStore {
    /// Runs one of the batch statements; answers the ids of the events it created.
    async fn insert_batch(
        &self,
        sql: &'static str,
        rows: &[&NewEvent<'_>],
        jobs: &BatchJobs<'_>,
    ) -> Result<Vec<Uuid>, sqlx::Error> {
        sqlx::query_scalar(sql)
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
            .bind(&jobs.ids)
            .bind(&jobs.events)
            .bind(&jobs.destinations)
            .bind(&jobs.times)
            .bind(JOBS_CHANNEL)
            .fetch_all(&self.pool)
            .await
    }
}
