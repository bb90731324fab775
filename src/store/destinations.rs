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

/// A destination whose jobs are held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub destination: String,
    /// Paused by an operator (else tripped by its circuit breaker).
    pub paused: bool,
    /// When a tripped destination's next probe is due.
    pub probe_at: Option<DateTime<Utc>>,
}

/// A circuit breaker's change of state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitChange {
    Tripped,
    Recovered,
}

/// A destination as the admin API shows it, for one tenant's jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct DestinationStats {
    /// Set while an operator has the destination paused.
    pub paused_at: Option<DateTime<Utc>>,
    /// Set while its circuit breaker has it tripped, with when the next probe is due.
    pub tripped_at: Option<DateTime<Utc>>,
    pub probe_at: Option<DateTime<Utc>>,
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

/// Makes the destination's row exist and locks it for the transaction (on PostgreSQL;
/// SQLite's write lock serialises anyway) before it is read, so that concurrent updates from
/// any process (attempts counted, tokens taken) apply one by one.
const LOCK_ROW: &str = "INSERT INTO destination_states (destination, updated_at) \
    VALUES ($1, $2) ON CONFLICT (destination) DO UPDATE SET updated_at = excluded.updated_at";

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
        Ok(self
            .destination_holds()
            .await?
            .into_iter()
            .filter(|h| h.paused)
            .map(|h| h.destination)
            .collect())
    }

    /// Every destination whose jobs are held: paused, or tripped by its circuit breaker.
    pub async fn destination_holds(&self) -> Result<Vec<Hold>, StoreError> {
        const SQL: &str = "SELECT destination, paused_at IS NOT NULL, probe_at \
            FROM destination_states WHERE paused_at IS NOT NULL OR tripped_at IS NOT NULL";
        let rows: Vec<(String, bool, Option<At>)> =
            dispatch!(self, s => sqlx::query_as(SQL).fetch_all(&s.pool).await?);
        Ok(rows
            .into_iter()
            .map(|(destination, paused, probe_at)| Hold {
                destination,
                paused,
                probe_at: probe_at.map(|t| t.0),
            })
            .collect())
    }

    /// Takes a tripped destination's probe: true for exactly one caller per cool-down, in any
    /// process, once `probe_at` has passed; the next probe is then due at `next`.
    pub async fn take_probe(
        &self,
        destination: &str,
        now: DateTime<Utc>,
        next: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "UPDATE destination_states SET probe_at = $3, updated_at = $2 \
            WHERE destination = $1 AND tripped_at IS NOT NULL AND paused_at IS NULL \
            AND probe_at <= $2";
        let done = dispatch!(self, s => sqlx::query(SQL)
            .bind(destination)
            .bind(At(now))
            .bind(At(next))
            .execute(&s.pool)
            .await?
            .rows_affected());
        Ok(done == 1)
    }

    /// Counts an attempt's result toward the destination's circuit breaker: a success closes
    /// it (the streak starts again), a failure lengthens the streak, and the `failures`-th
    /// in a row trips it, with the first probe due after `cool_down`; a failed probe puts the
    /// next one a `cool_down` later. Returns the change, if any.
    pub async fn record_circuit_attempt(
        &self,
        destination: &str,
        succeeded: bool,
        failures: u32,
        cool_down: chrono::Duration,
        now: DateTime<Utc>,
    ) -> Result<Option<CircuitChange>, StoreError> {
        const READ: &str =
            "SELECT failure_streak, tripped_at IS NOT NULL, probe_at FROM destination_states \
             WHERE destination = $1";
        const WRITE: &str = "\
            INSERT INTO destination_states (destination, failure_streak, tripped_at, probe_at, \
                updated_at) VALUES ($1, $2, $3, $4, $5) \
            ON CONFLICT (destination) DO UPDATE SET failure_streak = excluded.failure_streak, \
                tripped_at = CASE WHEN $6 THEN destination_states.tripped_at \
                    ELSE excluded.tripped_at END, \
                probe_at = excluded.probe_at, updated_at = excluded.updated_at";
        let change = in_write_tx!(self, tx => {
            sqlx::query(LOCK_ROW)
                .bind(destination)
                .bind(At(now))
                .execute(&mut *tx)
                .await?;
            let (streak, tripped, probe_at): (i32, bool, Option<At>) = sqlx::query_as(READ)
                .bind(destination)
                .fetch_one(&mut *tx)
                .await?;
            let (streak, trips, change) = if succeeded {
                (0, false, tripped.then_some(CircuitChange::Recovered))
            } else {
                let streak = streak.saturating_add(1);
                let trips = tripped || streak >= failures as i32;
                let change = (trips && !tripped).then_some(CircuitChange::Tripped);
                (streak, trips, change)
            };
            // A failed probe puts the next a cool-down later, never earlier than the probe's
            // taker already did.
            let next_probe = At(now + cool_down);
            let probe_at = trips.then(|| probe_at.map_or(next_probe, |p| p.max(next_probe)));
            sqlx::query(WRITE)
                .bind(destination)
                .bind(streak)
                .bind(trips.then_some(At(now)))
                .bind(probe_at)
                .bind(At(now))
                .bind(trips && tripped)
                .execute(&mut *tx)
                .await?;
            change
        });
        if change == Some(CircuitChange::Recovered) {
            self.wake_workers();
        }
        Ok(change)
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

    /// Takes up to `want` tokens from the destination's rate-limit bucket, shared by every
    /// process on the database: the bucket gains `per_second` tokens a second up to `burst`,
    /// and a whole token is one delivery. Returns how many it took, and when the next whole
    /// token will be there if it took none.
    pub async fn take_tokens(
        &self,
        destination: &str,
        want: i64,
        per_second: f64,
        burst: f64,
        now: DateTime<Utc>,
    ) -> Result<(i64, Option<DateTime<Utc>>), StoreError> {
        const READ: &str =
            "SELECT tokens, refilled_at FROM destination_states WHERE destination = $1";
        const WRITE: &str = "UPDATE destination_states SET tokens = $2, refilled_at = $3 \
            WHERE destination = $1";
        let taken = in_write_tx!(self, tx => {
            sqlx::query(LOCK_ROW)
                .bind(destination)
                .bind(At(now))
                .execute(&mut *tx)
                .await?;
            let (tokens, refilled_at): (Option<f64>, Option<At>) = sqlx::query_as(READ)
                .bind(destination)
                .fetch_one(&mut *tx)
                .await?;
            let elapsed = refilled_at
                .map_or(0.0, |t| (now - t.0).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6)
                .max(0.0);
            let available = tokens.map_or(burst, |t| (t + elapsed * per_second).min(burst));
            let taken = (available.floor() as i64).clamp(0, want.max(0));
            sqlx::query(WRITE)
                .bind(destination)
                .bind(available - taken as f64)
                .bind(At(now))
                .execute(&mut *tx)
                .await?;
            (taken, available - taken as f64)
        });
        let (taken, left) = taken;
        let next = (taken == 0).then(|| {
            let wait = ((1.0 - left) / per_second).max(0.0);
            now + chrono::Duration::microseconds((wait * 1e6).ceil() as i64)
        });
        Ok((taken, next))
    }

    /// Puts back tokens taken for deliveries that did not happen (fewer jobs were due).
    pub async fn give_back_tokens(
        &self,
        destination: &str,
        n: i64,
        burst: f64,
    ) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE destination_states SET tokens = \
            CASE WHEN tokens + $2 > $3 THEN $3 ELSE tokens + $2 END WHERE destination = $1";
        if n > 0 {
            dispatch!(self, s => sqlx::query(SQL)
                .bind(destination)
                .bind(n as f64)
                .bind(burst)
                .execute(&s.pool)
                .await?
                .rows_affected());
        }
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
        const STATE: &str = "SELECT paused_at, tripped_at, probe_at FROM destination_states \
            WHERE destination = $1";
        type State = (Option<At>, Option<At>, Option<At>);
        let state: Option<State> = dispatch!(self, s => sqlx::query_as(STATE)
            .bind(destination)
            .fetch_optional(&s.pool)
            .await?);
        let (paused_at, tripped_at, probe_at) = state.unwrap_or_default();
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
            paused_at: paused_at.map(|t| t.0),
            tripped_at: tripped_at.map(|t| t.0),
            probe_at: probe_at.map(|t| t.0),
            jobs_due,
            oldest_due_at: oldest.map(|t| t.0),
            recent_attempts: in_window.len() as i64,
            recent_successes: in_window.iter().filter(|o| **o == "succeeded").count() as i64,
            failure_streak: recent.iter().take_while(|(o, _)| o != "succeeded").count() as i64,
        })
    }
}
