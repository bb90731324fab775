//! Per-minute series for the console's charts: deliveries and successes of a destination,
//! ingest per source, and the sampled age of a destination's oldest due job. The minute of a
//! row is computed in SQL, the one expression the two databases write differently.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::codec::At;
use super::{Store, StoreError};

/// Minutes since `$since` of the time column `col`, as an integer.
fn minute_of(store: &Store, col: &str, since: &str) -> String {
    match store {
        Store::Postgres(_) => format!("FLOOR(EXTRACT(EPOCH FROM ({col} - {since})) / 60)::bigint"),
        Store::Sqlite(_) => format!("(({col} - {since}) / 60000)"),
    }
}

/// Unix minutes.
fn unix_minute(t: DateTime<Utc>) -> i64 {
    t.timestamp().div_euclid(60)
}

impl Store {
    /// For each of the `minutes` minutes from `since`: the destination's attempts (of
    /// `tenant`'s jobs) and how many succeeded.
    pub async fn delivery_minutes(
        &self,
        destination: &str,
        tenant: &str,
        since: DateTime<Utc>,
        minutes: usize,
    ) -> Result<Vec<(i64, i64)>, StoreError> {
        let sql = format!(
            "SELECT {m} AS m, count(*), \
             COALESCE(SUM(CASE WHEN a.outcome = 'succeeded' THEN 1 ELSE 0 END), 0) \
             FROM delivery_attempts a JOIN jobs j ON j.id = a.job_id \
             JOIN events e ON e.id = j.event_id \
             WHERE a.started_at >= $1 AND j.destination = $2 AND e.tenant = $3 \
             AND a.outcome IN ('succeeded', 'retry', 'failed') GROUP BY m",
            m = minute_of(self, "a.started_at", "$1")
        );
        let rows: Vec<(i64, i64, i64)> = dispatch!(self, s => sqlx::query_as(&sql)
            .bind(At(since))
            .bind(destination)
            .bind(tenant)
            .fetch_all(&s.pool)
            .await?);
        let mut series = vec![(0, 0); minutes];
        for (m, attempts, successes) in rows {
            if let Some(slot) = usize::try_from(m).ok().and_then(|m| series.get_mut(m)) {
                *slot = (attempts, successes);
            }
        }
        Ok(series)
    }

    /// For each source of `tenant` with events since `since`: events received in each of the
    /// `minutes` minutes from then.
    pub async fn ingest_minutes(
        &self,
        tenant: &str,
        since: DateTime<Utc>,
        minutes: usize,
    ) -> Result<BTreeMap<String, Vec<i64>>, StoreError> {
        let sql = format!(
            "SELECT e.source, {m} AS m, count(*) FROM events e \
             WHERE e.tenant = $2 AND e.received_at >= $1 GROUP BY e.source, m",
            m = minute_of(self, "e.received_at", "$1")
        );
        let rows: Vec<(String, i64, i64)> = dispatch!(self, s => sqlx::query_as(&sql)
            .bind(At(since))
            .bind(tenant)
            .fetch_all(&s.pool)
            .await?);
        let mut series: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for (source, m, n) in rows {
            let counts = series.entry(source).or_insert_with(|| vec![0; minutes]);
            if let Some(slot) = usize::try_from(m).ok().and_then(|m| counts.get_mut(m)) {
                *slot = n;
            }
        }
        Ok(series)
    }

    /// Records, for this minute, the age of each destination's oldest due job (none due: 0),
    /// and forgets samples older than three hours.
    pub async fn sample_destination_lag(
        &self,
        destinations: &[&str],
        now: DateTime<Utc>,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        const OLDEST: &str = "SELECT MIN(next_attempt_at) FROM jobs \
            WHERE status = 'pending' AND destination = $1 AND next_attempt_at <= $2";
        const SAVE: &str = "INSERT INTO destination_lag (destination, minute, oldest_due_seconds) \
            VALUES ($1, $2, $3) ON CONFLICT (destination, minute) \
            DO UPDATE SET oldest_due_seconds = excluded.oldest_due_seconds";
        const FORGET: &str = "DELETE FROM destination_lag WHERE minute < $1";
        let minute = unix_minute(now);
        let mut ages = Vec::with_capacity(destinations.len());
        for destination in destinations {
            let oldest: Option<At> = dispatch!(self, s => sqlx::query_scalar(OLDEST)
                .bind(*destination)
                .bind(At(now))
                .fetch_one(&s.pool)
                .await?);
            ages.push(oldest.map_or(0, |t| (now - t.0).num_seconds().max(0)));
        }
        in_write_tx!(self, tx => {
            for (destination, age) in destinations.iter().zip(&ages) {
                sqlx::query(SAVE)
                    .bind(*destination)
                    .bind(minute)
                    .bind(*age)
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query(FORGET).bind(minute - 180).execute(&mut *tx).await?;
        });
        Ok(destinations
            .iter()
            .map(|d| (*d).to_owned())
            .zip(ages)
            .collect())
    }

    /// Dead letters (not discarded) per destination that failed in `[from, to)`.
    pub async fn dead_letters_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        const SQL: &str = "SELECT destination, count(*) FROM jobs WHERE status = 'failed' \
            AND discarded_at IS NULL AND updated_at >= $1 AND updated_at < $2 \
            GROUP BY destination";
        Ok(dispatch!(self, s => sqlx::query_as(SQL)
            .bind(At(from))
            .bind(At(to))
            .fetch_all(&s.pool)
            .await?))
    }

    /// The sampled age of the destination's oldest due job, in seconds, for each of the
    /// `minutes` minutes from `since` (none where no sample was taken).
    pub async fn destination_lag(
        &self,
        destination: &str,
        since: DateTime<Utc>,
        minutes: usize,
    ) -> Result<Vec<Option<i64>>, StoreError> {
        const SQL: &str = "SELECT minute, oldest_due_seconds FROM destination_lag \
            WHERE destination = $1 AND minute >= $2";
        let first = unix_minute(since);
        let rows: Vec<(i64, i64)> = dispatch!(self, s => sqlx::query_as(SQL)
            .bind(destination)
            .bind(first)
            .fetch_all(&s.pool)
            .await?);
        let mut series = vec![None; minutes];
        for (minute, age) in rows {
            if let Some(slot) = usize::try_from(minute - first)
                .ok()
                .and_then(|m| series.get_mut(m))
            {
                *slot = Some(age);
            }
        }
        Ok(series)
    }
}
