//! Destination state shared by every process (`destination_states`), and what the
//! destinations page reads of the queue and of recent attempts. One statement text for both
//! databases.

use chrono::{DateTime, Utc};

use super::codec::At;
use super::{SavedResponse, Store, StoreError};

/// How many of a destination's most recent attempts the page reads: the success rate is of
/// the last hour's attempts up to this many, and a failure streak longer than this shows as
/// this many.
pub const RECENT_ATTEMPTS: i64 = 10_000;

/// A destination as the admin API shows it, for one tenant's jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct DestinationStats {
    /// Set while an operator has the destination paused.
    pub paused_at: Option<DateTime<Utc>>,
    /// Pending jobs due now.
    pub jobs_due: i64,
    /// The due time of the oldest of them.
    pub oldest_due_at: Option<DateTime<Utc>>,
    /// Attempts in the window, and how many of them succeeded.
    pub recent_attempts: i64,
    pub recent_successes: i64,
    /// Failed attempts since the last success (of the most recent `RECENT_ATTEMPTS`).
    pub failure_streak: i64,
}

const DUE: &str = "\
    SELECT count(*), MIN(j.next_attempt_at) FROM jobs j JOIN events e ON e.id = j.event_id \
    WHERE j.destination = $1 AND j.status = 'pending' AND j.next_attempt_at <= $2 \
    AND e.tenant = $3";

/// Attempt outcomes, newest first. Outcomes that are not the destination's answer (a lease
/// that ran out, a claim handed back) are left out.
const RECENT: &str = "\
    SELECT a.outcome, a.started_at >= $4 FROM delivery_attempts a \
    JOIN jobs j ON j.id = a.job_id JOIN events e ON e.id = j.event_id \
    WHERE j.destination = $1 AND e.tenant = $2 \
    AND a.outcome IN ('succeeded', 'retry', 'failed') \
    ORDER BY a.started_at DESC LIMIT $3";

impl Store {
    /// The destinations paused now.
    pub async fn held_destinations(&self) -> Result<Vec<String>, StoreError> {
        const SQL: &str = "SELECT destination FROM destination_states WHERE paused_at IS NOT NULL";
        Ok(dispatch!(self, s => sqlx::query_scalar(SQL).fetch_all(&s.pool).await?))
    }

    /// Pauses (`paused`) or resumes a destination, saving the admin response with it. A
    /// pause of a paused destination keeps its first `paused_at`. Wakes the workers of every
    /// process, so that a pause stops their hand-offs and a resume starts the held jobs.
    pub async fn set_destination_paused(
        &self,
        destination: &str,
        paused: bool,
        now: DateTime<Utc>,
        save: Option<&SavedResponse<'_>>,
    ) -> Result<(), StoreError> {
        const SQL: &str = "\
            INSERT INTO destination_states (destination, paused_at, updated_at) \
            VALUES ($1, $2, $3) ON CONFLICT (destination) DO UPDATE SET \
            paused_at = CASE WHEN excluded.paused_at IS NULL THEN NULL \
                ELSE COALESCE(destination_states.paused_at, excluded.paused_at) END, \
            updated_at = excluded.updated_at";
        in_write_tx!(self, tx => {
            sqlx::query(SQL)
                .bind(destination)
                .bind(paused.then_some(At(now)))
                .bind(At(now))
                .execute(&mut *tx)
                .await?;
            if let Some(save) = save {
                save_response!(tx, save, now);
            }
        });
        self.wake_workers();
        Ok(())
    }

    /// The destination's state and, of `tenant`'s jobs, the queue due by `now` and the
    /// attempts since `since` (at most `RECENT_ATTEMPTS`).
    pub async fn destination_stats(
        &self,
        destination: &str,
        tenant: &str,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<DestinationStats, StoreError> {
        const STATE: &str = "SELECT paused_at FROM destination_states WHERE destination = $1";
        let paused_at: Option<Option<At>> = dispatch!(self, s => sqlx::query_scalar(STATE)
            .bind(destination)
            .fetch_optional(&s.pool)
            .await?);
        let (jobs_due, oldest): (i64, Option<At>) = dispatch!(self, s => sqlx::query_as(DUE)
            .bind(destination)
            .bind(At(now))
            .bind(tenant)
            .fetch_one(&s.pool)
            .await?);
        let recent: Vec<(String, bool)> = dispatch!(self, s => sqlx::query_as(RECENT)
            .bind(destination)
            .bind(tenant)
            .bind(RECENT_ATTEMPTS)
            .bind(At(since))
            .fetch_all(&s.pool)
            .await?);
        let in_window: Vec<&str> = recent
            .iter()
            .filter(|(_, within)| *within)
            .map(|(o, _)| o.as_str())
            .collect();
        Ok(DestinationStats {
            paused_at: paused_at.flatten().map(|t| t.0),
            jobs_due,
            oldest_due_at: oldest.map(|t| t.0),
            recent_attempts: in_window.len() as i64,
            recent_successes: in_window.iter().filter(|o| **o == "succeeded").count() as i64,
            failure_streak: recent.iter().take_while(|(o, _)| o != "succeeded").count() as i64,
        })
    }
}
