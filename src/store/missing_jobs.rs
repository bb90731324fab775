//! The reconciler's repair of events routed by another configuration (a change of routes
//! rolling over several processes), one bounded step at a time. Every event records the
//! digest of the routes that chose its jobs, in the transaction that stores it with them; an
//! event whose digest is not the current one is routed again and gets the jobs it lacks.
//! Deciding which jobs is routing's business, so a step is a read ([`Store::reroute_scan`])
//! and a write ([`Store::create_missing_jobs`]), with the routing between them.

use chrono::{DateTime, Utc};

use super::codec::{At, Id};
use super::rows::{EventRow, EVENT_COLUMNS};
use super::{ArrivalCursor, JobFromEventSql, Store, StoreError, StoredEvent};
use crate::domain::{EventId, JobId};

/// The next `$4` events of source `$1` after the cursor (`$2`, `$3`), in arrival order
/// (`events_source_received_idx`; ties on `received_at` in order by id), each with whether
/// another configuration routed it: its digest is not `$5`. A purged event is never routed
/// again: it has no body left to deliver.
const SCAN: &str = "\
    SELECT id, received_at, purged_at IS NULL AND (route_digest IS NULL OR route_digest <> $5) \
    FROM events WHERE source = $1 AND received_at >= $2 AND (received_at, id) > ($2, $3) \
    ORDER BY received_at, id LIMIT $4";

/// Creates job `$1` for event `$2` and destination `$3`, due at `$5`, unless the event has a
/// job for that destination already or was purged or deleted meanwhile. PostgreSQL locks
/// the event row as the job goes in (see `admin::insert_job`).
const CREATE: JobFromEventSql = job_from_event_sql!(
    "INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
     created_at, updated_at, ordering_key, ordering_hold) \
     SELECT $1, e.id, $3, 'pending', 0, $5, $4, $4, $6, $7 FROM events e \
     WHERE e.id = $2 AND e.purged_at IS NULL AND NOT EXISTS ( \
         SELECT 1 FROM jobs j WHERE j.event_id = e.id AND j.destination = $3)"
);

/// One step of the scan: the events read that another configuration routed, and where to go
/// on from.
#[derive(Debug)]
pub struct RerouteScan {
    pub stale: Vec<StoredEvent>,
    /// `None` when the step read the last event there was.
    pub next: Option<ArrivalCursor>,
}

/// A job the repair creates if its event lacks one for the destination.
#[derive(Debug, Clone)]
pub struct MissingJob {
    pub event: EventId,
    pub destination: String,
    pub due: DateTime<Utc>,
    /// Its key's line, which it joins at the end.
    pub ordering: Option<crate::routing::JobOrdering>,
}

impl Store {
    /// Reads the next `limit` events of `source` after `after`, in arrival order, and returns
    /// those whose route digest is not `digest`, whole. No statement reads more than `limit`
    /// events: on PostgreSQL a long one would hold one snapshot for the whole scan, and no
    /// dead row anywhere (the queue's among them) could be removed until it ended. Bodies
    /// are read only for the stale events, which outside a change of routes are none.
    pub async fn reroute_scan(
        &self,
        source: &str,
        digest: i64,
        after: ArrivalCursor,
        limit: i64,
    ) -> Result<RerouteScan, StoreError> {
        let rows: Vec<(Id, At, bool)> = dispatch!(self, s => sqlx::query_as(SCAN)
            .bind(source)
            .bind(At(after.received_at))
            .bind(Id::from(after.event))
            .bind(limit)
            .bind(digest)
            .fetch_all(&s.pool)
            .await?);
        let last = rows.last().map(|&(id, at, _)| ArrivalCursor {
            received_at: at.0,
            event: id.into(),
        });
        let mut stale = Vec::new();
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE id = $1");
        for &(id, _, _) in rows.iter().filter(|r| r.2) {
            let row: Option<EventRow> = dispatch!(self, s => sqlx::query_as(&sql)
                .bind(id)
                .fetch_optional(&s.pool)
                .await?);
            if let Some(row) = row {
                stale.push(StoredEvent::try_from(row)?);
            }
        }
        Ok(RerouteScan {
            stale,
            next: last.filter(|_| rows.len() as i64 >= limit),
        })
    }

    /// Creates each job whose event has none for its destination, and records `digest` as
    /// the routes of the `rerouted` events, in one transaction; returns how many jobs it
    /// created. Recording the digest makes the repair of an event happen once: after a change
    /// of routes, the first sweep of each process would otherwise read the bodies of a whole
    /// `worker.reconcile_lookback` of events again. Under the write lock (SQLite) or the
    /// reconciler's lock (PostgreSQL) each insert checks again, so a job is created once,
    /// and a purged event gets none.
    pub async fn create_missing_jobs(
        &self,
        rerouted: &[EventId],
        digest: i64,
        jobs: &[MissingJob],
        now: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        if rerouted.is_empty() {
            return Ok(0);
        }
        let created = in_write_tx!(self, tx => {
            let mut created = 0;
            for job in jobs {
                created += sqlx::query(CREATE.for_store(self))
                    .bind(Id::from(JobId::for_event(job.event)))
                    .bind(Id::from(job.event))
                    .bind(job.destination.as_str())
                    .bind(At(now))
                    .bind(At(job.due.max(now)))
                    .bind(job.ordering.as_ref().map(|o| o.key.as_str()))
                    .bind(job.ordering.as_ref().is_some_and(|o| o.hold))
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            for &event in rerouted {
                sqlx::query("UPDATE events SET route_digest = $1 WHERE id = $2")
                    .bind(digest)
                    .bind(Id::from(event))
                    .execute(&mut *tx)
                    .await?;
            }
            created
        });
        if created > 0 {
            self.wake_workers();
        }
        Ok(created)
    }
}
