//! The admin queries' SQL, built from their filters. The text is the same for both
//! databases (sqlx's SQLite driver reads `$N` as the N-th argument); the `Arg`s are bound
//! through `codec`, which stores times and ids as each schema does.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::admin_types::{DeadLetterFilter, EventFilter, PageCursor};

#[derive(Debug, Clone)]
pub(super) enum Arg {
    Text(String),
    Time(DateTime<Utc>),
    Id(Uuid),
    Int(i64),
}

#[derive(Debug)]
pub(super) struct Built {
    pub sql: String,
    pub args: Vec<Arg>,
}

impl Built {
    pub(super) fn new() -> Self {
        Self {
            sql: String::new(),
            args: Vec::new(),
        }
    }

    /// Adds an argument and returns its placeholder.
    pub(super) fn arg(&mut self, a: Arg) -> String {
        self.args.push(a);
        format!("${}", self.args.len())
    }
}

use super::rows::{JOB_COLUMNS, SUMMARY_COLUMNS};
use super::EventStatus;

fn event_conditions(b: &mut Built, f: &EventFilter) -> String {
    let mut c = format!("e.tenant = {}", b.arg(Arg::Text(f.tenant.clone())));
    if let Some(v) = &f.source {
        c += &format!(" AND e.source = {}", b.arg(Arg::Text(v.clone())));
    }
    if let Some(v) = &f.event_type {
        c += &format!(" AND e.event_type = {}", b.arg(Arg::Text(v.clone())));
    }
    if let Some(v) = &f.provider_event_id {
        c += &format!(" AND e.provider_event_id = {}", b.arg(Arg::Text(v.clone())));
    }
    if let Some(v) = f.received_from {
        c += &format!(" AND e.received_at >= {}", b.arg(Arg::Time(v)));
    }
    if let Some(v) = f.received_to {
        c += &format!(" AND e.received_at < {}", b.arg(Arg::Time(v)));
    }
    match f.status {
        None => {}
        Some(EventStatus::Job(v)) => {
            c += &format!(
                " AND EXISTS (SELECT 1 FROM jobs s WHERE s.event_id = e.id AND s.status = {})",
                b.arg(Arg::Text(v.as_str().into()))
            )
        }
        Some(EventStatus::NoRoute) => {
            c += " AND NOT EXISTS (SELECT 1 FROM jobs s WHERE s.event_id = e.id)";
        }
    }
    c
}

/// Events matching `f`, newest first, after the keyset position `after`.
pub(super) fn list_events(f: &EventFilter, after: Option<PageCursor>, limit: i64) -> Built {
    let mut b = Built::new();
    let mut c = event_conditions(&mut b, f);
    if let Some(p) = after {
        let (at, id) = (b.arg(Arg::Time(p.at)), b.arg(Arg::Id(p.id)));
        c += &format!(" AND (e.received_at, e.id) < ({at}, {id})");
    }
    let limit = b.arg(Arg::Int(limit));
    b.sql = format!(
        "SELECT {SUMMARY_COLUMNS} FROM events e WHERE {c} \
         ORDER BY e.received_at DESC, e.id DESC LIMIT {limit}"
    );
    b
}

fn dead_letter_conditions(b: &mut Built, f: &DeadLetterFilter) -> String {
    let mut c = format!(
        "j.status = 'failed' AND j.discarded_at IS NULL AND e.tenant = {}",
        b.arg(Arg::Text(f.tenant.clone()))
    );
    if let Some(v) = &f.destination {
        c += &format!(" AND j.destination = {}", b.arg(Arg::Text(v.clone())));
    }
    if let Some(v) = &f.source {
        c += &format!(" AND e.source = {}", b.arg(Arg::Text(v.clone())));
    }
    if let Some(v) = f.failed_before {
        c += &format!(" AND j.updated_at < {}", b.arg(Arg::Time(v)));
    }
    c
}

/// Dead letters matching `f`, most recently failed first.
pub(super) fn list_dead_letters(
    f: &DeadLetterFilter,
    after: Option<PageCursor>,
    limit: i64,
) -> Built {
    let mut b = Built::new();
    let mut c = dead_letter_conditions(&mut b, f);
    if let Some(p) = after {
        let (at, id) = (b.arg(Arg::Time(p.at)), b.arg(Arg::Id(p.id)));
        c += &format!(" AND (j.updated_at, j.id) < ({at}, {id})");
    }
    let limit = b.arg(Arg::Int(limit));
    b.sql = format!(
        "SELECT {JOB_COLUMNS}, {SUMMARY_COLUMNS} FROM jobs j JOIN events e ON e.id = j.event_id \
         WHERE {c} ORDER BY j.updated_at DESC, j.id DESC LIMIT {limit}"
    );
    b
}

/// Puts up to `limit` dead letters matching `f` back to `pending` with a fresh schedule.
pub(super) fn retry_dead_letters(f: &DeadLetterFilter, now: DateTime<Utc>, limit: i64) -> Built {
    let mut b = Built::new();
    let c = dead_letter_conditions(&mut b, f);
    let limit = b.arg(Arg::Int(limit));
    let now = b.arg(Arg::Time(now));
    b.sql = format!(
        "UPDATE jobs SET status = 'pending', attempts = 0, next_attempt_at = {now}, \
         updated_at = {now} WHERE id IN (SELECT j.id FROM jobs j JOIN events e \
         ON e.id = j.event_id WHERE {c} LIMIT {limit})"
    );
    b
}

/// Discards up to `limit` dead letters matching `f`.
pub(super) fn discard_dead_letters(f: &DeadLetterFilter, now: DateTime<Utc>, limit: i64) -> Built {
    let mut b = Built::new();
    let c = dead_letter_conditions(&mut b, f);
    let limit = b.arg(Arg::Int(limit));
    let now = b.arg(Arg::Time(now));
    b.sql = format!(
        "UPDATE jobs SET discarded_at = {now}, updated_at = {now} WHERE id IN (SELECT j.id \
         FROM jobs j JOIN events e ON e.id = j.event_id WHERE {c} LIMIT {limit})"
    );
    b
}

/// Counts events matching `f`.
pub(super) fn count_events(f: &EventFilter) -> Built {
    let mut b = Built::new();
    let c = event_conditions(&mut b, f);
    b.sql = format!("SELECT COUNT(*) FROM events e WHERE {c}");
    b
}
