//! Reconciliation against providers' APIs: each source's state row (the lease that lets one
//! process at a time run it, the cursor an interrupted run left, when the next run is due)
//! and the record of every run. The lease is claimed as a job is: a token and an expiry set
//! by one UPDATE whose condition only one claimer can meet, so it holds across every process
//! on one PostgreSQL; an expired lease (a crashed process) is taken over.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::codec::{At, Id};
use super::{Store, StoreError};

/// What a claimed lease finds: where the last run stopped, and any wait the provider asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconciliationState {
    /// The provider's cursor to go on from, and the window start it belongs to.
    pub cursor: Option<(String, DateTime<Utc>)>,
    /// The provider asked (`Retry-After`) for no call before this.
    pub not_before: Option<DateTime<Utc>>,
}

/// One run, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconciliationRun {
    pub id: Uuid,
    pub tenant: String,
    pub source: String,
    pub provider: String,
    /// `schedule` or `admin`.
    pub run_by: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub pages: i64,
    pub listed: i64,
    pub missing: i64,
    pub recovered: i64,
    pub errors: i64,
    pub last_error: Option<String>,
    /// Where the next run goes on from; `None` when this one reached the end of the list.
    pub cursor: Option<String>,
}

/// How a run leaves its source's state.
#[derive(Debug, Clone)]
pub struct ReconciliationEnd {
    pub cursor: Option<(String, DateTime<Utc>)>,
    pub not_before: Option<DateTime<Utc>>,
    pub next_due_at: DateTime<Utc>,
}

const ENSURE_ROW: &str =
    "INSERT INTO reconciliation_state (source) VALUES ($1) ON CONFLICT (source) DO NOTHING";

/// Takes the lease of source `$1` (token `$2`, until `$3`) if it is free or expired at `$4`,
/// and, when `$5` (a scheduled run), only if the source's next run is due.
const CLAIM: &str = "\
    UPDATE reconciliation_state SET lease_token = $2, lease_until = $3 \
    WHERE source = $1 AND (lease_until IS NULL OR lease_until <= $4) \
    AND (NOT $5 OR next_due_at IS NULL OR next_due_at <= $4)";

const READ_STATE: &str =
    "SELECT cursor, cursor_since, not_before FROM reconciliation_state WHERE source = $1";

const RENEW: &str = "UPDATE reconciliation_state SET lease_until = $3 \
    WHERE source = $1 AND lease_token = $2";

const RELEASE: &str = "UPDATE reconciliation_state SET lease_token = NULL, lease_until = NULL \
    WHERE source = $1 AND lease_token = $2";

/// Ends the run holding lease `$2`: its cursor, the provider's wait and the next due time.
const END: &str = "\
    UPDATE reconciliation_state SET lease_token = NULL, lease_until = NULL, cursor = $3, \
    cursor_since = $4, not_before = $5, next_due_at = $6 \
    WHERE source = $1 AND lease_token = $2";

const INSERT_RUN: &str = "\
    INSERT INTO reconciliation_runs (id, tenant, source, provider, run_by, started_at, \
        finished_at, window_since, window_until, pages, listed, missing, recovered, errors, \
        last_error, cursor) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)";

const RUN_COLUMNS: &str = "id, tenant, source, provider, run_by, started_at, finished_at, \
    window_since, window_until, pages, listed, missing, recovered, errors, last_error, cursor";

type RunRow = (
    Id,
    String,
    String,
    String,
    String,
    At,
    At,
    At,
    At,
    i64,
    i64,
    i64,
    i64,
    i64,
    Option<String>,
    Option<String>,
);

impl Store {
    /// Claims the right to run `source`'s reconciliation until `lease_until`; `None` when
    /// another run holds it (or, for a `scheduled` run, when it is not due yet).
    pub async fn claim_reconciliation(
        &self,
        source: &str,
        token: Uuid,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        scheduled: bool,
    ) -> Result<Option<ReconciliationState>, StoreError> {
        let row: Option<(Option<String>, Option<At>, Option<At>)> = in_write_tx!(self, tx => {
            sqlx::query(ENSURE_ROW).bind(source).execute(&mut *tx).await?;
            let claimed = sqlx::query(CLAIM)
                .bind(source)
                .bind(Id(token))
                .bind(At(lease_until))
                .bind(At(now))
                .bind(scheduled)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if claimed == 1 {
                Some(sqlx::query_as(READ_STATE).bind(source).fetch_one(&mut *tx).await?)
            } else {
                None
            }
        });
        Ok(row.map(|(cursor, since, not_before)| ReconciliationState {
            cursor: cursor.zip(since.map(|s| s.0)),
            not_before: not_before.map(|t| t.0),
        }))
    }

    /// Extends the lease `token` holds to `lease_until`; `false` when it is no longer held
    /// (it expired and another run took it over).
    pub async fn renew_reconciliation(
        &self,
        source: &str,
        token: Uuid,
        lease_until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let done = dispatch!(self, s => sqlx::query(RENEW)
            .bind(source)
            .bind(Id(token))
            .bind(At(lease_until))
            .execute(&s.pool)
            .await?
            .rows_affected());
        Ok(done == 1)
    }

    /// Gives the lease back without a run (the provider asked to wait).
    pub async fn release_reconciliation(
        &self,
        source: &str,
        token: Uuid,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => sqlx::query(RELEASE)
            .bind(source)
            .bind(Id(token))
            .execute(&s.pool)
            .await
            .map(drop)?);
        Ok(())
    }

    /// Records `run` and leaves the source's state as `end` says, releasing the lease, in
    /// one transaction. A run whose lease was taken over (it outlived its expiry) is still
    /// recorded but leaves the state to the run that holds it now.
    pub async fn finish_reconciliation(
        &self,
        run: &ReconciliationRun,
        token: Uuid,
        end: &ReconciliationEnd,
    ) -> Result<(), StoreError> {
        in_write_tx!(self, tx => {
            sqlx::query(INSERT_RUN)
                .bind(Id(run.id))
                .bind(&run.tenant)
                .bind(&run.source)
                .bind(&run.provider)
                .bind(&run.run_by)
                .bind(At(run.started_at))
                .bind(At(run.finished_at))
                .bind(At(run.since))
                .bind(At(run.until))
                .bind(run.pages)
                .bind(run.listed)
                .bind(run.missing)
                .bind(run.recovered)
                .bind(run.errors)
                .bind(run.last_error.as_deref())
                .bind(run.cursor.as_deref())
                .execute(&mut *tx)
                .await?;
            sqlx::query(END)
                .bind(&run.source)
                .bind(Id(token))
                .bind(end.cursor.as_ref().map(|c| c.0.as_str()))
                .bind(end.cursor.as_ref().map(|c| At(c.1)))
                .bind(end.not_before.map(At))
                .bind(At(end.next_due_at))
                .execute(&mut *tx)
                .await?;
        });
        Ok(())
    }

    /// `source`'s last `limit` runs, newest first.
    pub async fn reconciliation_runs(
        &self,
        source: &str,
        limit: i64,
    ) -> Result<Vec<ReconciliationRun>, StoreError> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM reconciliation_runs WHERE source = $1 \
             ORDER BY started_at DESC, id DESC LIMIT $2"
        );
        let rows: Vec<RunRow> = dispatch!(self, s => sqlx::query_as(&sql)
            .bind(source)
            .bind(limit)
            .fetch_all(&s.pool)
            .await?);
        Ok(rows.into_iter().map(run_from_row).collect())
    }

    /// Which of `ids` are stored as provider event ids of `source`: the dedupe keys, so
    /// events whose content retention removed count while their ids are remembered.
    pub async fn stored_provider_event_ids(
        &self,
        source: &str,
        ids: &[String],
    ) -> Result<HashSet<String>, StoreError> {
        let mut stored = HashSet::new();
        // A page of a provider's list is at most a few hundred ids; chunks keep each
        // statement's parameters well under either database's limit.
        for chunk in ids.chunks(200) {
            let placeholders: Vec<String> = (2..chunk.len() + 2).map(|n| format!("${n}")).collect();
            let sql = format!(
                "SELECT provider_event_id FROM event_keys WHERE source = $1 \
                 AND provider_event_id IN ({})",
                placeholders.join(", ")
            );
            let found: Vec<(String,)> = dispatch!(self, s => {
                let mut q = sqlx::query_as(&sql).bind(source);
                for id in chunk {
                    q = q.bind(id.as_str());
                }
                q.fetch_all(&s.pool).await?
            });
            stored.extend(found.into_iter().map(|(id,)| id));
        }
        Ok(stored)
    }
}

fn run_from_row(r: RunRow) -> ReconciliationRun {
    ReconciliationRun {
        id: r.0 .0,
        tenant: r.1,
        source: r.2,
        provider: r.3,
        run_by: r.4,
        started_at: r.5 .0,
        finished_at: r.6 .0,
        since: r.7 .0,
        until: r.8 .0,
        pages: r.9,
        listed: r.10,
        missing: r.11,
        recovered: r.12,
        errors: r.13,
        last_error: r.14,
        cursor: r.15,
    }
}
