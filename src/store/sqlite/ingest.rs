//! Group commit on SQLite: a batch is written with multi-row inserts. Each statement is a
//! round trip to the connection's worker thread, and those hand-offs, not SQLite itself, were
//! most of the cost of a row-by-row batch. For the same reason the event insert returns no
//! rows: each row returned is a message from that thread, and each message may wake the
//! runtime's thread (an `eventfd` write). The count of rows inserted says whether every
//! event was new, which is the common case; only when one was not are the new ids read.

use std::collections::HashSet;
use std::sync::OnceLock;

use sqlx::{Sqlite, Transaction};

use super::{millis, parse_uuid};
use crate::domain::EventId;
use crate::store::{InsertOutcome, NewEvent, StoreError};

/// Rows per statement are powers of two up to this, so a connection's statement cache holds
/// a handful of shapes instead of one per batch size.
const MAX_ROWS: usize = 64;
const EVENT_PARAMS: usize = 12;
const JOB_PARAMS: usize = 9;
// SQLite's default limit on a statement's parameters.
const _: () = assert!(EVENT_PARAMS * MAX_ROWS < 32_766 && JOB_PARAMS * MAX_ROWS < 32_766);

fn statement(
    rows: usize,
    cache: &'static OnceLock<Vec<String>>,
    head: &str,
    row: &str,
) -> &'static str {
    let all = cache.get_or_init(|| {
        (0..=MAX_ROWS.trailing_zeros())
            .map(|p| {
                let values = vec![row; 1 << p].join(", ");
                head.replace("{values}", &values)
            })
            .collect()
    });
    &all[rows.trailing_zeros() as usize]
}

fn events_statement(rows: usize) -> &'static str {
    static CACHE: OnceLock<Vec<String>> = OnceLock::new();
    statement(
        rows,
        &CACHE,
        "INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
         content_type, headers, body, verified_scheme, verified_secret_index, route_digest) \
         VALUES {values} ON CONFLICT (source, provider_event_id) DO NOTHING",
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
}

fn jobs_statement(rows: usize) -> &'static str {
    static CACHE: OnceLock<Vec<String>> = OnceLock::new();
    statement(
        rows,
        &CACHE,
        "INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
         locked_until, claim_token, created_at, updated_at, ordering_key, ordering_hold) \
         SELECT column1, column2, column3, \
         CASE WHEN column5 IS NULL THEN 'pending' ELSE 'in_progress' END, \
         CASE WHEN column5 IS NULL THEN 0 ELSE 1 END, column7, column6, column5, column4, \
         column4, column8, column9 FROM (VALUES {values})",
        "(?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
}

/// Splits `n` into power-of-two chunk sizes, largest first.
fn chunks(mut n: usize) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if n == 0 {
            return None;
        }
        let size = if n >= MAX_ROWS {
            MAX_ROWS
        } else {
            1 << (usize::BITS - 1 - n.leading_zeros())
        };
        n -= size;
        Some(size)
    })
}

/// Inserts the (already deduplicated) events and the jobs of those it created, in `tx`.
/// Returns each event's outcome, in order, and whether any job was queued for any worker
/// (not claimed as it was made).
pub(super) async fn insert_batch(
    tx: &mut Transaction<'_, Sqlite>,
    events: &[&NewEvent<'_>],
) -> Result<(Vec<InsertOutcome>, bool), StoreError> {
    let ids: Vec<String> = events.iter().map(|e| e.id.to_string()).collect();
    let mut created: HashSet<String> = HashSet::with_capacity(events.len());
    let mut start = 0;
    for size in chunks(events.len()) {
        let mut query = sqlx::query(events_statement(size));
        let chunk_ids = &ids[start..start + size];
        for (e, id) in events[start..start + size].iter().zip(chunk_ids) {
            query = query
                .bind(id.as_str())
                .bind(e.tenant.as_str())
                .bind(e.source.as_str())
                .bind(e.provider_event_id.as_str())
                .bind(e.event_type)
                .bind(millis(e.received_at))
                .bind(e.content_type)
                .bind(e.headers_json.as_str())
                .bind(e.body)
                .bind(e.verified_scheme)
                .bind(e.verified_secret_index)
                .bind(e.route_digest);
        }
        let inserted = query.execute(&mut **tx).await?.rows_affected();
        if inserted == size as u64 {
            created.extend(chunk_ids.iter().cloned());
        } else if inserted > 0 {
            // The ids are fresh, so those now stored are the ones this statement inserted.
            let placeholders = vec!["?"; size].join(", ");
            let sql = format!("SELECT id FROM events WHERE id IN ({placeholders})");
            let mut query = sqlx::query_scalar::<_, String>(&sql);
            for id in chunk_ids {
                query = query.bind(id.as_str());
            }
            created.extend(query.fetch_all(&mut **tx).await?);
        }
        start += size;
    }

    let mut jobs = Vec::new();
    for (e, id) in events.iter().zip(&ids) {
        if created.contains(id) {
            for job in e.jobs() {
                jobs.push(JobRow {
                    id: job.id.to_string(),
                    event_id: id.as_str(),
                    destination: job.destination.as_str(),
                    at: millis(e.received_at),
                    due: millis(job.due),
                    token: job.claim.map(|c| c.token.to_string()),
                    locked_until: job.claim.map(|c| millis(c.locked_until)),
                    key: job.ordering.map(|o| o.key.as_str()),
                    hold: job.ordering.is_some_and(|o| o.hold),
                });
            }
        }
    }
    let mut start = 0;
    for size in chunks(jobs.len()) {
        let mut query = sqlx::query(jobs_statement(size));
        for job in &jobs[start..start + size] {
            query = query
                .bind(job.id.as_str())
                .bind(job.event_id)
                .bind(job.destination)
                .bind(job.at)
                .bind(job.token.as_deref())
                .bind(job.locked_until)
                .bind(job.due)
                .bind(job.key)
                .bind(job.hold);
        }
        query.execute(&mut **tx).await?;
        start += size;
    }

    let mut outcomes = Vec::with_capacity(events.len());
    for (e, id) in events.iter().zip(&ids) {
        if created.contains(id) {
            outcomes.push(InsertOutcome::Created(e.id));
            continue;
        }
        let existing: Option<String> =
            sqlx::query_scalar("SELECT id FROM events WHERE source = ? AND provider_event_id = ?")
                .bind(e.source.as_str())
                .bind(e.provider_event_id.as_str())
                .fetch_optional(&mut **tx)
                .await?;
        let existing = existing.ok_or_else(|| {
            StoreError::Corrupt("conflicting event vanished before it could be read".into())
        })?;
        outcomes.push(InsertOutcome::Duplicate(EventId::from_uuid(parse_uuid(
            &existing,
        )?)));
    }
    let queued = jobs.iter().any(|j| j.token.is_none());
    Ok((outcomes, queued))
}

/// A job row to insert; `token` and `locked_until` are set for a job claimed as it is made.
struct JobRow<'a> {
    id: String,
    event_id: &'a str,
    destination: &'a str,
    at: i64,
    due: i64,
    token: Option<String>,
    locked_until: Option<i64>,
    key: Option<&'a str>,
    hold: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_powers_of_two_that_add_up() {
        for n in 0..=300 {
            let sizes: Vec<usize> = chunks(n).collect();
            assert_eq!(sizes.iter().sum::<usize>(), n, "n = {n}");
            assert!(sizes.iter().all(|s| s.is_power_of_two() && *s <= MAX_ROWS));
        }
        assert_eq!(chunks(45).collect::<Vec<_>>(), vec![32, 8, 4, 1]);
    }

    #[test]
    fn statements_have_one_placeholder_per_value() {
        for p in 0..=MAX_ROWS.trailing_zeros() {
            let rows = 1 << p;
            assert_eq!(
                events_statement(rows).matches('?').count(),
                rows * EVENT_PARAMS
            );
            assert_eq!(jobs_statement(rows).matches('?').count(), rows * JOB_PARAMS);
        }
    }
}
