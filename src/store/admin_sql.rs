//! The admin queries' SQL, built once for both backends. Only placeholders differ (`$1` or
//! `?1`); each backend binds the `Arg`s in its own types (times, uuids).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::admin_types::{DeadLetterFilter, EventFilter, PageCursor};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    Postgres,
    Sqlite,
}

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
    dialect: Dialect,
}

impl Built {
    fn new(dialect: Dialect) -> Self {
        Self {
            sql: String::new(),
            args: Vec::new(),
            dialect,
        }
    }

    /// Adds an argument and returns its placeholder.
    fn arg(&mut self, a: Arg) -> String {
        self.args.push(a);
        match self.dialect {
            Dialect::Postgres => format!("${}", self.args.len()),
            Dialect::Sqlite => format!("?{}", self.args.len()),
        }
    }
}

pub(super) const SUMMARY_COLUMNS: &str = "e.id AS e_id, e.tenant AS e_tenant, \
    e.source AS e_source, e.provider_event_id AS e_provider_event_id, \
    e.event_type AS e_event_type, e.received_at AS e_received_at, \
    e.verified_secret_index AS e_verified_secret_index";

pub(super) const JOB_COLUMNS_J: &str = "j.id, j.event_id, j.destination, j.status, j.attempts, \
    j.next_attempt_at, j.locked_until, j.last_error, j.created_at, j.updated_at, j.discarded_at";

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
    if let Some(v) = f.status {
        c += &format!(
            " AND EXISTS (SELECT 1 FROM jobs s WHERE s.event_id = e.id AND s.status = {})",
            b.arg(Arg::Text(v.as_str().into()))
        );
    }
    c
}

/// Events matching `f`, newest first, after the keyset position `after`.
pub(super) fn list_events(
    d: Dialect,
    f: &EventFilter,
    after: Option<PageCursor>,
    limit: i64,
) -> Built {
    let mut b = Built::new(d);
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
    d: Dialect,
    f: &DeadLetterFilter,
    after: Option<PageCursor>,
    limit: i64,
) -> Built {
    let mut b = Built::new(d);
    let mut c = dead_letter_conditions(&mut b, f);
    if let Some(p) = after {
        let (at, id) = (b.arg(Arg::Time(p.at)), b.arg(Arg::Id(p.id)));
        c += &format!(" AND (j.updated_at, j.id) < ({at}, {id})");
    }
    let limit = b.arg(Arg::Int(limit));
    b.sql = format!(
        "SELECT {JOB_COLUMNS_J}, {SUMMARY_COLUMNS} FROM jobs j JOIN events e ON e.id = j.event_id \
         WHERE {c} ORDER BY j.updated_at DESC, j.id DESC LIMIT {limit}"
    );
    b
}

/// Puts up to `limit` dead letters matching `f` back to `pending` with a fresh schedule.
pub(super) fn retry_dead_letters(
    d: Dialect,
    f: &DeadLetterFilter,
    now: DateTime<Utc>,
    limit: i64,
) -> Built {
    let mut b = Built::new(d);
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
pub(super) fn discard_dead_letters(
    d: Dialect,
    f: &DeadLetterFilter,
    now: DateTime<Utc>,
    limit: i64,
) -> Built {
    let mut b = Built::new(d);
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
pub(super) fn count_events(d: Dialect, f: &EventFilter) -> Built {
    let mut b = Built::new(d);
    let c = event_conditions(&mut b, f);
    b.sql = format!("SELECT COUNT(*) FROM events e WHERE {c}");
    b
}
