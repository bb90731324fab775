//! The quarantine: requests to a known source that failed verification. One text of each
//! statement serves both stores (ids and times through `codec`).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::admin_types::check_filter_text;
use super::codec::{At, Id};
use super::{headers_from_json, PageCursor, SavedResponse, Store, StoreError};

/// A rejected request on its way into the quarantine.
#[derive(Debug, Clone)]
pub struct NewQuarantined {
    pub id: Uuid,
    pub tenant: String,
    pub source: String,
    pub received_at: DateTime<Utc>,
    pub reason: String,
    pub message: String,
    pub method: String,
    pub query: String,
    /// A JSON list of `[name, value]` pairs, credential headers redacted.
    pub headers_json: String,
    pub body: bytes::Bytes,
}

/// A quarantined request as listed: everything but its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantineSummary {
    pub id: Uuid,
    pub tenant: String,
    pub source: String,
    pub received_at: DateTime<Utc>,
    pub reason: String,
    pub message: String,
    /// When it was last verified (on arrival, then by each re-verification), and how often.
    pub checked_at: DateTime<Utc>,
    pub checks: i32,
    pub method: String,
    pub body_bytes: i64,
}

/// A quarantined request whole, as re-verification needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    pub summary: QuarantineSummary,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Which quarantined requests of a tenant; every field narrows.
#[derive(Debug, Clone, Default)]
pub struct QuarantineFilter {
    pub tenant: String,
    pub source: Option<String>,
    pub reason: Option<String>,
    /// Received at or after.
    pub since: Option<DateTime<Utc>>,
    /// Received before.
    pub until: Option<DateTime<Utc>>,
}

impl QuarantineFilter {
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        check_filter_text(&[("source", &self.source), ("reason", &self.reason)])
    }
}

/// The order a page walks in: the newest first (listing) or the oldest first (re-verifying
/// in arrival order, as the provider sent them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    NewestFirst,
    OldestFirst,
}

const SUMMARY_COLUMNS: &str =
    "id, tenant, source, received_at, reason, message, checked_at, checks, method, body_bytes";

#[derive(sqlx::FromRow)]
struct SummaryRow {
    id: Id,
    tenant: String,
    source: String,
    received_at: At,
    reason: String,
    message: String,
    checked_at: At,
    checks: i32,
    method: String,
    body_bytes: i64,
}

impl From<SummaryRow> for QuarantineSummary {
    fn from(r: SummaryRow) -> Self {
        Self {
            id: r.id.0,
            tenant: r.tenant,
            source: r.source,
            received_at: r.received_at.0,
            reason: r.reason,
            message: r.message,
            checked_at: r.checked_at.0,
            checks: r.checks,
            method: r.method,
            body_bytes: r.body_bytes,
        }
    }
}

#[derive(sqlx::FromRow)]
struct WholeRow {
    #[sqlx(flatten)]
    summary: SummaryRow,
    query: String,
    headers: String,
    body: Vec<u8>,
}

/// Deletes the rows of source `$1` past the newest `$2` or past `$3` bytes, newest first.
const EVICT: &str = "DELETE FROM quarantine WHERE id IN (\
    SELECT id FROM (SELECT id, \
        ROW_NUMBER() OVER (ORDER BY received_at DESC, id DESC) AS n, \
        SUM(body_bytes) OVER (ORDER BY received_at DESC, id DESC \
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS total \
      FROM quarantine WHERE source = $1) ranked \
    WHERE n > $2 OR total > $3)";

impl Store {
    /// Keeps `rows` and, in the same transaction, evicts each source's oldest past the bounds.
    /// Returns how many each source had evicted, for the sources that had any.
    pub async fn quarantine_requests(
        &self,
        rows: &[NewQuarantined],
        max_per_source: i64,
        max_bytes_per_source: i64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut sources: Vec<&str> = rows.iter().map(|r| r.source.as_str()).collect();
        sources.sort_unstable();
        sources.dedup();
        let evicted = in_write_tx!(self, tx => {
            for r in rows {
                sqlx::query(
                    "INSERT INTO quarantine (id, tenant, source, received_at, reason, message, \
                     checked_at, checks, method, query, headers, body, body_bytes) \
                     VALUES ($1, $2, $3, $4, $5, $6, $4, 1, $7, $8, $9, $10, $11)",
                )
                .bind(Id(r.id))
                .bind(&r.tenant)
                .bind(&r.source)
                .bind(At(r.received_at))
                .bind(&r.reason)
                .bind(&r.message)
                .bind(&r.method)
                .bind(&r.query)
                .bind(&r.headers_json)
                .bind(r.body.as_ref())
                .bind(i64::try_from(r.body.len()).unwrap_or(i64::MAX))
                .execute(&mut *tx)
                .await?;
            }
            let mut evicted = Vec::new();
            for source in &sources {
                let n = sqlx::query(EVICT)
                    .bind(*source)
                    .bind(max_per_source)
                    .bind(max_bytes_per_source)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if n > 0 {
                    evicted.push(((*source).to_owned(), n));
                }
            }
            evicted
        });
        Ok(evicted)
    }

    /// A page of a tenant's quarantine in `walk` order, after `after` in that order.
    pub async fn list_quarantine(
        &self,
        filter: &QuarantineFilter,
        after: Option<PageCursor>,
        limit: i64,
        walk: Walk,
    ) -> Result<Vec<QuarantineSummary>, StoreError> {
        filter.check()?;
        let mut sql = format!("SELECT {SUMMARY_COLUMNS} FROM quarantine WHERE tenant = $1");
        let mut n = 1;
        let mut next = || {
            n += 1;
            format!("${n}")
        };
        if filter.source.is_some() {
            sql += &format!(" AND source = {}", next());
        }
        if filter.reason.is_some() {
            sql += &format!(" AND reason = {}", next());
        }
        if filter.since.is_some() {
            sql += &format!(" AND received_at >= {}", next());
        }
        if filter.until.is_some() {
            sql += &format!(" AND received_at < {}", next());
        }
        let (cmp, order) = match walk {
            Walk::NewestFirst => ("<", "DESC"),
            Walk::OldestFirst => (">", "ASC"),
        };
        if after.is_some() {
            let (at, id) = (next(), next());
            sql += &format!(" AND (received_at, id) {cmp} ({at}, {id})");
        }
        sql += &format!(" ORDER BY received_at {order}, id {order} LIMIT {}", next());
        let rows: Vec<SummaryRow> = dispatch!(self, s => {
            let mut q = sqlx::query_as(&sql).bind(filter.tenant.as_str());
            if let Some(v) = &filter.source {
                q = q.bind(v.as_str());
            }
            if let Some(v) = &filter.reason {
                q = q.bind(v.as_str());
            }
            if let Some(v) = filter.since {
                q = q.bind(At(v));
            }
            if let Some(v) = filter.until {
                q = q.bind(At(v));
            }
            if let Some(p) = after {
                q = q.bind(At(p.at)).bind(Id(p.id));
            }
            q.bind(limit).fetch_all(&s.pool).await?
        });
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// One quarantined request of `tenant`, whole.
    pub async fn find_quarantined(
        &self,
        id: Uuid,
        tenant: &str,
    ) -> Result<Option<Quarantined>, StoreError> {
        let sql = format!(
            "SELECT {SUMMARY_COLUMNS}, query, headers, body FROM quarantine \
             WHERE id = $1 AND tenant = $2"
        );
        let row: Option<WholeRow> = dispatch!(self, s => sqlx::query_as(&sql)
            .bind(Id(id))
            .bind(tenant)
            .fetch_optional(&s.pool)
            .await?);
        row.map(|r| {
            Ok(Quarantined {
                summary: r.summary.into(),
                query: r.query,
                headers: headers_from_json(&r.headers)?,
                body: r.body,
            })
        })
        .transpose()
    }

    /// Takes a request out of the quarantine (re-verified and ingested, or discarded) and
    /// saves the idempotent response in the same transaction. Whether it was there.
    pub async fn remove_quarantined(
        &self,
        id: Uuid,
        tenant: &str,
        now: DateTime<Utc>,
        save: Option<&SavedResponse<'_>>,
    ) -> Result<bool, StoreError> {
        let removed = in_write_tx!(self, tx => {
            let done = sqlx::query("DELETE FROM quarantine WHERE id = $1 AND tenant = $2")
                .bind(Id(id))
                .bind(tenant)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if let Some(save) = save {
                save_response!(tx, save, now);
            }
            done == 1
        });
        Ok(removed)
    }

    /// Records a re-verification that failed again: its reason, and when.
    pub async fn recheck_quarantined(
        &self,
        id: Uuid,
        tenant: &str,
        reason: &str,
        message: &str,
        now: DateTime<Utc>,
        save: Option<&SavedResponse<'_>>,
    ) -> Result<bool, StoreError> {
        let updated = in_write_tx!(self, tx => {
            let done = sqlx::query(
                "UPDATE quarantine SET reason = $1, message = $2, checked_at = $3, \
                 checks = checks + 1 WHERE id = $4 AND tenant = $5",
            )
            .bind(reason)
            .bind(message)
            .bind(At(now))
            .bind(Id(id))
            .bind(tenant)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if let Some(save) = save {
                save_response!(tx, save, now);
            }
            done == 1
        });
        Ok(updated)
    }

    /// Deletes up to `limit` requests received before `before`. How many went.
    pub async fn sweep_quarantine(
        &self,
        before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        const SQL: &str = "DELETE FROM quarantine WHERE id IN ( \
            SELECT id FROM quarantine WHERE received_at < $1 LIMIT $2)";
        let done = dispatch!(self, s => sqlx::query(SQL)
            .bind(At(before))
            .bind(limit)
            .execute(&s.pool)
            .await?
            .rows_affected());
        Ok(done)
    }

    /// (requests, body bytes) kept for `source`: the bounds' test.
    pub async fn quarantine_usage(&self, source: &str) -> Result<(i64, i64), StoreError> {
        const SQL: &str = "SELECT COUNT(*), CAST(COALESCE(SUM(body_bytes), 0) AS BIGINT) \
            FROM quarantine WHERE source = $1";
        let usage: (i64, i64) = dispatch!(self, s => sqlx::query_as(SQL)
            .bind(source)
            .fetch_one(&s.pool)
            .await?);
        Ok(usage)
    }
}
