//! PostgreSQL: ingest's group commit, one statement per batch.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use sqlx::PgConnection;
use uuid::Uuid;

use super::PgStore;
use crate::domain::EventId;
use crate::store::{batch, InsertOutcome, NewEvent, StoreError};

/// Group commit's one statement. The dedupe keys go in first (`event_keys`, whose UNIQUE
/// key decides which copy of an event is stored); then the events whose key this statement
/// created, and the jobs of those events, pre-built for every event in the batch. Each row
/// answered is an event created, and whether the statement queued a job for any worker (not
/// when every job was claimed as it was created): the wake-up follows the commit (see
/// `wakeups`). `{on_conflict}` is empty on the fast path (see `insert_events`).
macro_rules! insert_batch_sql {
    ($on_conflict:literal) => {
        concat!(
            "\
    WITH keyed AS ( \
        INSERT INTO event_keys (source, provider_event_id, event_id, received_at) \
        SELECT source, pid, id, rat \
        FROM UNNEST($3::text[], $4::text[], $1::uuid[], $6::timestamptz[]) \
            AS k(source, pid, id, rat) \
        ",
            $on_conflict,
            " RETURNING event_id \
    ), created AS ( \
        INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
            content_type, headers, body, verified_scheme, verified_secret_index, route_digest) \
        SELECT id, tenant, source, pid, etype, rat, ctype, h::jsonb, body, scheme, idx, rd \
        FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], \
            $6::timestamptz[], $7::text[], $8::text[], $9::bytea[], $10::text[], $11::int4[], \
            $18::int8[]) \
            AS t(id, tenant, source, pid, etype, rat, ctype, h, body, scheme, idx, rd) \
        WHERE t.id IN (SELECT event_id FROM keyed) \
        RETURNING id \
    ), queued AS ( \
        INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
            locked_until, claim_token, created_at, updated_at, ordering_key, ordering_hold) \
        SELECT j.id, j.event_id, j.destination, \
            CASE WHEN j.token IS NULL THEN 'pending' ELSE 'in_progress' END, \
            CASE WHEN j.token IS NULL THEN 0 ELSE 1 END, j.due, j.lease, j.token, j.t, j.t, \
            j.okey, j.ohold \
        FROM UNNEST($12::uuid[], $13::uuid[], $14::text[], $15::timestamptz[], \
            $16::uuid[], $17::timestamptz[], $19::timestamptz[], $20::text[], $21::bool[]) \
            AS j(id, event_id, destination, t, token, lease, due, okey, ohold) \
        WHERE j.event_id IN (SELECT id FROM created) \
        RETURNING claim_token IS NULL AS queued \
    ) \
    SELECT c.id, EXISTS (SELECT 1 FROM queued WHERE queued) FROM created c"
        )
    };
}

/// Plain inserts: any copy of a stored event makes the whole statement fail (23505). Public
/// for the bench, which measures it against the statement before partitioning.
pub const INSERT_BATCH_FAST_SQL: &str = insert_batch_sql!("");
/// ON CONFLICT waits for a concurrent inserter of the same key, so exactly one transaction
/// creates a key (and its event), and skips copies of stored events.
const INSERT_BATCH_SQL: &str =
    insert_batch_sql!("ON CONFLICT (source, provider_event_id) DO NOTHING");

impl PgStore {
    /// Writes a batch as one statement, so one implicit transaction and one round trip: the
    /// events and the jobs of the events it created. The statement's answer arrives after
    /// its commit is durable (`synchronous_commit`); then, if it queued a job, listening
    /// workers are woken.
    ///
    /// Copies of stored events are rare (a provider's retry), so a batch first goes in with
    /// plain inserts, which cost PostgreSQL less than ON CONFLICT's speculative insertion. If
    /// any event in it is already stored, the unique index rejects the whole statement, nothing
    /// of it is written, and the batch goes again with ON CONFLICT DO NOTHING, which stores
    /// each new event once and answers each copy as a duplicate. After such a batch the next ones use ON CONFLICT directly until one
    /// meets no copy, so a burst of retries does not pay twice per batch.
    pub async fn insert_events(
        &self,
        events: &[NewEvent<'_>],
    ) -> Result<Vec<InsertOutcome>, StoreError> {
        let (uniques, slot) = batch::dedupe(events);
        let rows: Vec<&NewEvent<'_>> = uniques.iter().map(|&i| &events[i]).collect();
        let arrays = BatchArrays::for_events(&rows);
        let (created, found) = self
            .ingest_connections
            .run(async |conn: &mut PgConnection| {
                let created = self.insert_rows(conn, &arrays).await?;
                let found = lookup_conflicted(conn, &rows, &created.ids).await?;
                Ok::<_, sqlx::Error>((created, found))
            })
            .await?;
        if created.queued_a_job {
            self.job_wakeups.wake();
        }
        let created: HashSet<Uuid> = created.ids.into_iter().collect();
        let mut existing: HashMap<(&str, &str), Uuid> = HashMap::new();
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

impl PgStore {
    /// The batch's rows: the fast path first, ON CONFLICT after a copy (see `insert_events`).
    async fn insert_rows(
        &self,
        conn: &mut PgConnection,
        arrays: &BatchArrays<'_>,
    ) -> Result<Created, sqlx::Error> {
        let saw_copies = &self.ingest_saw_copies;
        if saw_copies.load(Ordering::Relaxed) {
            let created = insert_batch(conn, INSERT_BATCH_SQL, arrays).await?;
            if created.ids.len() == arrays.ids.len() {
                saw_copies.store(false, Ordering::Relaxed);
            }
            return Ok(created);
        }
        match insert_batch(conn, INSERT_BATCH_FAST_SQL, arrays).await {
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                saw_copies.store(true, Ordering::Relaxed);
                insert_batch(conn, INSERT_BATCH_SQL, arrays).await
            }
            other => other,
        }
    }
}

/// Copies of events stored earlier (or by a concurrent batch that won the key): read after
/// the insert committed, so the winner's row is visible.
async fn lookup_conflicted(
    conn: &mut PgConnection,
    rows: &[&NewEvent<'_>],
    created: &[Uuid],
) -> Result<Vec<(Uuid, String, String)>, sqlx::Error> {
    let created: HashSet<&Uuid> = created.iter().collect();
    let conflicted: Vec<&NewEvent<'_>> = rows
        .iter()
        .copied()
        .filter(|e| !created.contains(&e.id.as_uuid()))
        .collect();
    if conflicted.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as(
        "SELECT e.event_id, e.source, e.provider_event_id FROM event_keys e \
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
    .fetch_all(conn)
    .await
}

/// The statement's parameters: one array per events column, and one job per destination for
/// each event. Built once, in one pass: a batch that goes again after a rejected fast path
/// reuses them (nothing of it was written).
#[derive(Default)]
struct BatchArrays<'a> {
    ids: Vec<Uuid>,
    tenants: Vec<&'a str>,
    sources: Vec<&'a str>,
    provider_ids: Vec<&'a str>,
    types: Vec<Option<&'a str>>,
    received: Vec<chrono::DateTime<chrono::Utc>>,
    content_types: Vec<Option<&'a str>>,
    headers: Vec<&'a str>,
    bodies: Vec<&'a [u8]>,
    schemes: Vec<&'a str>,
    secret_indexes: Vec<i32>,
    job_ids: Vec<Uuid>,
    job_events: Vec<Uuid>,
    job_destinations: Vec<&'a str>,
    job_times: Vec<chrono::DateTime<chrono::Utc>>,
    job_tokens: Vec<Option<Uuid>>,
    job_leases: Vec<Option<chrono::DateTime<chrono::Utc>>>,
    job_due: Vec<chrono::DateTime<chrono::Utc>>,
    job_keys: Vec<Option<&'a str>>,
    job_holds: Vec<bool>,
    route_digests: Vec<Option<i64>>,
}

impl<'a> BatchArrays<'a> {
    fn for_events(rows: &[&'a NewEvent<'a>]) -> Self {
        let mut a = BatchArrays::default();
        for e in rows {
            a.ids.push(e.id.as_uuid());
            a.tenants.push(e.tenant.as_str());
            a.sources.push(e.source.as_str());
            a.provider_ids.push(e.provider_event_id.as_str());
            a.types.push(e.event_type);
            a.received.push(e.received_at);
            a.content_types.push(e.content_type);
            a.headers.push(e.headers_json.as_str());
            a.bodies.push(e.body);
            a.schemes.push(e.verified_scheme);
            a.secret_indexes.push(e.verified_secret_index);
            a.route_digests.push(e.route_digest);
            for job in e.jobs() {
                a.job_ids.push(job.id.as_uuid());
                a.job_events.push(e.id.as_uuid());
                a.job_destinations.push(job.destination.as_str());
                a.job_times.push(e.received_at);
                a.job_tokens.push(job.claim.map(|c| c.token));
                a.job_leases.push(job.claim.map(|c| c.locked_until));
                a.job_due.push(job.due);
                a.job_keys.push(job.ordering.map(|o| o.key.as_str()));
                a.job_holds.push(job.ordering.is_some_and(|o| o.hold));
            }
        }
        a
    }
}

/// What a batch statement wrote.
struct Created {
    /// The events it created (copies of stored events are not among them).
    ids: Vec<Uuid>,
    /// It queued a job that no worker had claimed as it was created.
    queued_a_job: bool,
}

/// Runs one of the batch statements.
async fn insert_batch(
    conn: &mut PgConnection,
    sql: &'static str,
    a: &BatchArrays<'_>,
) -> Result<Created, sqlx::Error> {
    let rows: Vec<(Uuid, bool)> = sqlx::query_as(sql)
        .bind(&a.ids)
        .bind(&a.tenants)
        .bind(&a.sources)
        .bind(&a.provider_ids)
        .bind(&a.types)
        .bind(&a.received)
        .bind(&a.content_types)
        .bind(&a.headers)
        .bind(&a.bodies)
        .bind(&a.schemes)
        .bind(&a.secret_indexes)
        .bind(&a.job_ids)
        .bind(&a.job_events)
        .bind(&a.job_destinations)
        .bind(&a.job_times)
        .bind(&a.job_tokens)
        .bind(&a.job_leases)
        .bind(&a.route_digests)
        .bind(&a.job_due)
        .bind(&a.job_keys)
        .bind(&a.job_holds)
        .fetch_all(conn)
        .await?;
    Ok(Created {
        queued_a_job: rows.first().is_some_and(|&(_, queued)| queued),
        ids: rows.into_iter().map(|(id, _)| id).collect(),
    })
}
