//! "What did not get delivered": every job that has not succeeded and is not simply waiting
//! for its first attempt: a dead letter (failed, not discarded), a job held by its
//! destination's pause or circuit breaker, or a job still retrying after a failed attempt.
//! One statement text for both databases.

use chrono::{DateTime, Utc};

use super::admin_sql::{self, Arg, Built};
use super::rows::{JobRow, SummaryRow, JOB_COLUMNS, SUMMARY_COLUMNS};
use super::{codec, BulkProgress, JobWithEvent, PageCursor, ProgressKey, Store, StoreError};

/// Which undelivered jobs an admin query is about; `tenant` always applies.
#[derive(Debug, Clone, Default)]
pub struct UndeliveredFilter {
    pub tenant: String,
    pub destination: Option<String>,
    pub source: Option<String>,
    /// Events received at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Events received before this time.
    pub until: Option<DateTime<Utc>>,
}

impl UndeliveredFilter {
    /// Refuses text no store can compare (see `check_filter_text`).
    fn check(&self) -> Result<(), StoreError> {
        super::admin_types::check_filter_text(&[
            ("destination", &self.destination),
            ("source", &self.source),
        ])
    }
}

/// Why a job is undelivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UndeliveredReason {
    /// Failed for good: a dead letter.
    DeadLetter,
    /// Held while its destination is paused.
    Paused,
    /// Held while its destination's circuit breaker is tripped.
    Tripped,
    /// Pending again after a failed attempt.
    Retrying,
}

impl UndeliveredReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DeadLetter => "dead_letter",
            Self::Paused => "paused",
            Self::Tripped => "tripped",
            Self::Retrying => "retrying",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Undelivered {
    pub job: JobWithEvent,
    pub reason: UndeliveredReason,
}

#[derive(sqlx::FromRow)]
struct UndeliveredRow {
    #[sqlx(flatten)]
    job: JobRow,
    #[sqlx(flatten)]
    event: SummaryRow,
    held_paused: bool,
    held_tripped: bool,
}

/// The rows: `j` the job, `e` its event, `s` its destination's state (if any).
const FROM: &str = "jobs j JOIN events e ON e.id = j.event_id \
    LEFT JOIN destination_states s ON s.destination = j.destination";

fn conditions(b: &mut Built, f: &UndeliveredFilter) -> String {
    let mut c = format!(
        "e.tenant = {} AND ((j.status = 'failed' AND j.discarded_at IS NULL) \
         OR (j.status = 'pending' AND (j.attempts > 0 OR s.paused_at IS NOT NULL \
             OR s.tripped_at IS NOT NULL)))",
        b.arg(Arg::Text(f.tenant.clone()))
    );
    if let Some(v) = &f.destination {
        c += &format!(" AND j.destination = {}", b.arg(Arg::Text(v.clone())));
    }
    if let Some(v) = &f.source {
        c += &format!(" AND e.source = {}", b.arg(Arg::Text(v.clone())));
    }
    if let Some(v) = f.since {
        c += &format!(" AND e.received_at >= {}", b.arg(Arg::Time(v)));
    }
    if let Some(v) = f.until {
        c += &format!(" AND e.received_at < {}", b.arg(Arg::Time(v)));
    }
    c
}

impl Store {
    /// Undelivered jobs matching `filter`, most recently created first, after `after`.
    pub async fn list_undelivered(
        &self,
        filter: &UndeliveredFilter,
        after: Option<PageCursor>,
        limit: i64,
    ) -> Result<Vec<Undelivered>, StoreError> {
        filter.check()?;
        let mut b = Built::new();
        let mut c = conditions(&mut b, filter);
        if let Some(p) = after {
            let (at, id) = (b.arg(Arg::Time(p.at)), b.arg(Arg::Id(p.id)));
            c += &format!(" AND (j.created_at, j.id) < ({at}, {id})");
        }
        let limit = b.arg(Arg::Int(limit));
        b.sql = format!(
            "SELECT {JOB_COLUMNS}, {SUMMARY_COLUMNS}, s.paused_at IS NOT NULL AS held_paused, \
             s.tripped_at IS NOT NULL AS held_tripped FROM {FROM} WHERE {c} \
             ORDER BY j.created_at DESC, j.id DESC LIMIT {limit}"
        );
        let rows: Vec<UndeliveredRow> = dispatch_listing!(self, pool =>
            bind_built!(sqlx::query_as(&b.sql), b).fetch_all(pool).await?);
        rows.into_iter()
            .map(|r| {
                let job = super::StoredJob::try_from(r.job)?;
                let reason = match (job.status, r.held_paused, r.held_tripped) {
                    (crate::queue::JobStatus::Failed, _, _) => UndeliveredReason::DeadLetter,
                    (_, true, _) => UndeliveredReason::Paused,
                    (_, _, true) => UndeliveredReason::Tripped,
                    _ => UndeliveredReason::Retrying,
                };
                Ok(Undelivered {
                    job: JobWithEvent {
                        job,
                        event: r.event.into(),
                    },
                    reason,
                })
            })
            .collect()
    }

    /// One committed batch of a retry of undelivered jobs: up to `limit` of those matching
    /// `filter` and last changed before `before` (so each is retried once per run, and
    /// what fails again meanwhile is left alone). A dead letter goes back to `pending` with
    /// a fresh schedule; a retrying job is due now. A held job stays held: it goes out when
    /// its destination is resumed or recovers. Commits the batch with the progress (whose `after`
    /// the caller uses to keep `before`).
    pub async fn retry_undelivered_batch(
        &self,
        filter: &UndeliveredFilter,
        before: DateTime<Utc>,
        progress: BulkProgress,
        limit: i64,
        now: DateTime<Utc>,
        key: Option<ProgressKey<'_>>,
    ) -> Result<BulkProgress, StoreError> {
        filter.check()?;
        let mut b = Built::new();
        let c = conditions(&mut b, filter);
        let (before, limit, at) = (
            b.arg(Arg::Time(before)),
            b.arg(Arg::Int(limit)),
            b.arg(Arg::Time(now)),
        );
        b.sql = format!(
            "UPDATE jobs SET status = 'pending', \
             attempts = CASE WHEN status = 'failed' THEN 0 ELSE attempts END, \
             next_attempt_at = {at}, updated_at = {at} WHERE id IN (SELECT j.id FROM {FROM} \
             WHERE {c} AND j.updated_at < {before} AND s.paused_at IS NULL \
             AND s.tripped_at IS NULL LIMIT {limit})"
        );
        let next = in_write_tx!(self, tx => {
            let n = bind_built!(sqlx::query(&b.sql), b)
                .execute(&mut *tx)
                .await?
                .rows_affected() as i64;
            let next = BulkProgress {
                after: progress.after,
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
}
