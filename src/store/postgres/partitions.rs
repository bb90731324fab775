//! PostgreSQL: the time partitions of `events`, `jobs` and `delivery_attempts`
//! (docs/decisions/postgres-time-partitions.md). Each table is partitioned by a UUIDv7 id
//! whose first 48 bits are unix milliseconds, so a partition's bounds are two instants:
//! `events` and `jobs` share bounds (a job's id carries its event's time), and retention drops
//! an expired pair in one short transaction, unless a job in it is still pending or in
//! progress. `delivery_attempts` partitions go once no event partition they could belong to
//! is left.

use chrono::{DateTime, Utc};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use super::PgStore;
use crate::store::StoreError;

/// Arbitrary, fixed: the transaction-scoped advisory lock that keeps partition maintenance
/// (creating and dropping) to one process at a time.
const PARTITIONS_LOCK_KEY: i64 = 0x686f_6f6b_7061_7274;

/// The partitioned tables, in the order their partitions are created.
const TABLES: [&str; 3] = ["events", "jobs", "delivery_attempts"];

/// Partitions exist this far past `now` at least: four intervals, and never less than two
/// days, so ingest finds its partition even if maintenance stops for a while (every process
/// creates them at start, and the reconciler's sweep every minute).
fn horizon(now: DateTime<Utc>, interval: chrono::Duration) -> DateTime<Utc> {
    now + (interval * 4).max(chrono::Duration::days(2))
}

/// What a retention pass over the partitions did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PartitionSweep {
    /// Events that went with the partitions dropped.
    pub expired_events: u64,
    /// Expired partitions kept because a job in them is pending or in progress (or their
    /// lock could not be taken quickly under load: the next sweep tries again).
    pub held: u64,
    /// Partitions of the three tables dropped.
    pub dropped: u64,
}

/// One partition: its name and bounds, as unix milliseconds (`None`: MINVALUE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    pub from: Option<i64>,
    pub to: i64,
}

/// The lowest UUIDv7 of a millisecond: the bound between partitions.
pub fn bound(millis: i64) -> Uuid {
    Uuid::from_u128((millis.max(0) as u128) << 80)
}

fn millis_of(id: &str) -> Option<i64> {
    let id = Uuid::parse_str(id).ok()?;
    i64::try_from(id.as_u128() >> 80).ok()
}

/// Reads `FOR VALUES FROM ('…') TO ('…')` (or `FROM (MINVALUE)`) as written by
/// `pg_get_expr`.
fn parse_bounds(name: String, expr: &str) -> Option<Partition> {
    let quoted: Vec<&str> = expr.split('\'').skip(1).step_by(2).collect();
    let (from, to) = match quoted.as_slice() {
        [to] if expr.contains("MINVALUE") => (None, millis_of(to)?),
        [from, to] => (Some(millis_of(from)?), millis_of(to)?),
        _ => return None,
    };
    Some(Partition { name, from, to })
}

/// The partitions of `table`, oldest first.
pub async fn list(conn: &mut PgConnection, table: &str) -> Result<Vec<Partition>, StoreError> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i \
         JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass",
    )
    .bind(table)
    .fetch_all(conn)
    .await?;
    let mut parts = rows
        .into_iter()
        .map(|(name, expr)| {
            parse_bounds(name, &expr).ok_or_else(|| {
                StoreError::Corrupt(format!("unexpected partition bound of {table}: {expr}"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    parts.sort_by_key(|p| p.to);
    Ok(parts)
}

fn partition_name(table: &str, from: i64) -> String {
    let at = DateTime::<Utc>::from_timestamp_millis(from).unwrap_or_default();
    format!("{table}_p{}", at.format("%Y%m%d%H%M"))
}

impl PgStore {
    /// Creates the partitions missing between the newest one and `horizon(now)`, the same
    /// ranges for each table.
    pub async fn ensure_partitions(&self, now: DateTime<Utc>) -> Result<u64, StoreError> {
        let interval = chrono::Duration::from_std(self.partition_interval)
            .unwrap_or(chrono::Duration::days(1));
        let until = horizon(now, interval).timestamp_millis();
        let mut conn = self.pool.acquire().await?;
        let mut tx = conn.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(PARTITIONS_LOCK_KEY)
            .execute(&mut *tx)
            .await?;
        let mut created = 0;
        for table in TABLES {
            let Some(mut from) = list(&mut tx, table).await?.last().map(|p| p.to) else {
                return Err(StoreError::Corrupt(format!("{table} has no partition")));
            };
            while from < until {
                let to = from + interval.num_milliseconds();
                let sql = format!(
                    "CREATE TABLE \"{}\" PARTITION OF {table} FOR VALUES FROM ('{}') TO ('{}')",
                    partition_name(table, from),
                    bound(from),
                    bound(to)
                );
                sqlx::query(&sql).execute(&mut *tx).await?;
                created += 1;
                from = to;
            }
        }
        tx.commit().await?;
        Ok(created)
    }

    /// Drops each pair of `events` and `jobs` partitions that ends before `received_before`
    /// and has no job pending or in progress, then the `delivery_attempts` partitions that
    /// end before the oldest event partition left. A held pair loses its settled events in
    /// batches of `batch` instead (`delete_settled_in`), as unpartitioned retention would.
    pub async fn drop_expired_partitions(
        &self,
        received_before: DateTime<Utc>,
        batch: i64,
    ) -> Result<PartitionSweep, StoreError> {
        let cutoff = received_before.timestamp_millis();
        let mut conn = self.pool.acquire().await?;
        let events = list(&mut conn, "events").await?;
        let jobs = list(&mut conn, "jobs").await?;
        let mut sweep = PartitionSweep::default();
        let mut oldest_kept = None;
        for part in &events {
            let twin = jobs.iter().find(|j| j.from == part.from && j.to == part.to);
            let dropped = match twin {
                Some(jobs_part) if part.to <= cutoff => {
                    self.drop_pair(&mut conn, part, jobs_part).await?
                }
                _ => None,
            };
            match dropped {
                Some(n) => {
                    sweep.expired_events += n;
                    sweep.dropped += 2;
                }
                None => {
                    if part.to <= cutoff {
                        sweep.held += 1;
                        sweep.expired_events +=
                            self.delete_settled_in(part, received_before, batch).await?;
                    }
                    oldest_kept = oldest_kept.or(Some(part.from));
                }
            }
        }
        // Attempts are never older than their event: those before the oldest event partition
        // left belong to events already gone.
        let attempts_before = match oldest_kept {
            Some(None) => return Ok(sweep),
            Some(Some(from)) => from.min(cutoff),
            None => cutoff,
        };
        for part in list(&mut conn, "delivery_attempts").await? {
            if part.to > attempts_before {
                break;
            }
            if self.drop_alone(&mut conn, &part.name).await? {
                sweep.dropped += 1;
            }
        }
        Ok(sweep)
    }

    /// One pair, in one transaction: both partitions locked, then checked for unfinished
    /// jobs, then dropped. `None` if a job holds it or the locks were not granted in time:
    /// under a lock timeout shorter than `deadlock_timeout`, this transaction is the one to
    /// give up when it meets an ingest or a claim waiting in the other order.
    async fn drop_pair(
        &self,
        conn: &mut PgConnection,
        events: &Partition,
        jobs: &Partition,
    ) -> Result<Option<u64>, StoreError> {
        // Counted before the locks, not under them (a scan of the whole partition): no event
        // is added to a range that ended before retention, ids being times.
        let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM \"{}\"", events.name))
            .fetch_one(&mut *conn)
            .await?;
        let mut tx = conn.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(PARTITIONS_LOCK_KEY)
            .execute(&mut *tx)
            .await?;
        sqlx::query("SET LOCAL lock_timeout = '200ms'")
            .execute(&mut *tx)
            .await?;
        let locked = sqlx::query(&format!(
            "LOCK TABLE \"{}\", \"{}\" IN ACCESS EXCLUSIVE MODE",
            events.name, jobs.name
        ))
        .execute(&mut *tx)
        .await;
        if let Err(e) = locked {
            tx.rollback().await?;
            return lock_not_granted(e).map(|()| None);
        }
        let unfinished: bool = sqlx::query_scalar(&format!(
            "SELECT EXISTS (SELECT 1 FROM \"{}\" WHERE status IN ('pending', 'in_progress'))",
            jobs.name
        ))
        .fetch_one(&mut *tx)
        .await?;
        if unfinished {
            // Explicitly: a dropped transaction rolls back only at the connection's next use,
            // and this connection's locks would stall the batched delete that follows.
            tx.rollback().await?;
            return Ok(None);
        }
        let dropped = sqlx::query(&format!(
            "DROP TABLE \"{}\", \"{}\"",
            jobs.name, events.name
        ))
        .execute(&mut *tx)
        .await;
        if let Err(e) = dropped {
            tx.rollback().await?;
            return lock_not_granted(e).map(|()| None);
        }
        tx.commit().await?;
        Ok(Some(n as u64))
    }

    async fn drop_alone(&self, conn: &mut PgConnection, name: &str) -> Result<bool, StoreError> {
        let mut tx = conn.begin().await?;
        sqlx::query("SET LOCAL lock_timeout = '200ms'")
            .execute(&mut *tx)
            .await?;
        match sqlx::query(&format!("DROP TABLE \"{name}\""))
            .execute(&mut *tx)
            .await
        {
            Ok(_) => {
                tx.commit().await?;
                Ok(true)
            }
            Err(e) => {
                tx.rollback().await?;
                lock_not_granted(e).map(|()| false)
            }
        }
    }

    /// In a held partition: deletes, batch by batch, its settled events received before the
    /// time, with their jobs and attempts.
    async fn delete_settled_in(
        &self,
        part: &Partition,
        received_before: DateTime<Utc>,
        batch: i64,
    ) -> Result<u64, StoreError> {
        let range = (bound(part.from.unwrap_or(0)), bound(part.to));
        let mut total = 0;
        loop {
            let (read, deleted) = self
                .delete_batch(Some(range), received_before, batch)
                .await?;
            total += deleted;
            if read < batch as u64 {
                return Ok(total);
            }
        }
    }

    /// Deletes up to `limit` settled events received before the time (within the id range,
    /// if given), with their jobs and attempts: no foreign key cascades between partitioned
    /// tables. Returns how many events it deleted.
    pub async fn delete_settled(
        &self,
        ids: Option<(Uuid, Uuid)>,
        received_before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        Ok(self.delete_batch(ids, received_before, limit).await?.1)
    }

    /// One batch, in one transaction of two statements. The first locks the candidates
    /// (`FOR UPDATE`; concurrent sweeps skip each other's), which makes a replay or a repair
    /// that is about to add a job to one of them wait (it locks its event `FOR KEY SHARE`)
    /// and then find it gone. The second, under a snapshot taken after the locks, checks
    /// again for unfinished jobs, so a job committed just before the lock still keeps its
    /// event. Returns the candidates read and the events deleted.
    async fn delete_batch(
        &self,
        ids: Option<(Uuid, Uuid)>,
        received_before: DateTime<Utc>,
        limit: i64,
    ) -> Result<(u64, u64), StoreError> {
        const CANDIDATES: &str = "\
            SELECT e.id FROM events e WHERE e.id >= $1 AND e.id < $2 AND e.received_at < $3 \
                AND NOT EXISTS (SELECT 1 FROM jobs j \
                    WHERE j.event_id = e.id AND j.status IN ('pending', 'in_progress')) \
            ORDER BY e.received_at LIMIT $4 FOR UPDATE OF e SKIP LOCKED";
        const DELETE: &str = "\
            WITH settled AS ( \
                SELECT g.id FROM UNNEST($1::uuid[]) AS g(id) WHERE NOT EXISTS ( \
                    SELECT 1 FROM jobs j WHERE j.event_id = g.id \
                        AND j.status IN ('pending', 'in_progress')) \
            ), jobs_gone AS ( \
                DELETE FROM jobs WHERE event_id IN (SELECT id FROM settled) RETURNING id \
            ), attempts_gone AS ( \
                DELETE FROM delivery_attempts WHERE job_id IN (SELECT id FROM jobs_gone) \
            ) \
            DELETE FROM events WHERE id IN (SELECT id FROM settled)";
        let (from, to) = ids.unwrap_or((Uuid::nil(), Uuid::max()));
        let mut tx = self.pool.begin().await?;
        let candidates: Vec<Uuid> = sqlx::query_scalar(CANDIDATES)
            .bind(from)
            .bind(to)
            .bind(received_before)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        let deleted = if candidates.is_empty() {
            0
        } else {
            sqlx::query(DELETE)
                .bind(&candidates)
                .execute(&mut *tx)
                .await?
                .rows_affected()
        };
        tx.commit().await?;
        Ok((candidates.len() as u64, deleted))
    }

    /// Forgets, batch by batch, the dedupe keys of events received before the time, but
    /// never one whose event is still stored (held by an unfinished job): a provider's retry
    /// of it must stay a duplicate.
    pub async fn forget_expired_keys(
        &self,
        received_before: DateTime<Utc>,
        batch: i64,
    ) -> Result<u64, StoreError> {
        const SQL: &str = "DELETE FROM event_keys WHERE ctid IN (SELECT k.ctid FROM event_keys k \
            WHERE k.received_at < $1 AND NOT EXISTS (SELECT 1 FROM events e \
                WHERE e.id = k.event_id) \
            ORDER BY k.received_at LIMIT $2)";
        crate::store::retention::drain(batch, || async {
            Ok(sqlx::query(SQL)
                .bind(received_before)
                .bind(batch)
                .execute(&self.pool)
                .await?
                .rows_affected())
        })
        .await
    }
}

/// A lock timeout (55P03) or deadlock (40P01) ends the attempt quietly: the next sweep
/// tries again. Anything else is an error.
fn lock_not_granted(e: sqlx::Error) -> Result<(), StoreError> {
    match &e {
        sqlx::Error::Database(d) if matches!(d.code().as_deref(), Some("55P03" | "40P01")) => {
            tracing::info!(
                "a partition's lock was not granted in time; the next sweep tries again"
            );
            Ok(())
        }
        _ => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_read_back_as_the_milliseconds_they_were_made_from() {
        let (a, b) = (1_765_000_000_000, 1_765_086_400_000);
        let expr = format!("FOR VALUES FROM ('{}') TO ('{}')", bound(a), bound(b));
        let part = parse_bounds("events_p".into(), &expr).unwrap();
        assert_eq!((part.from, part.to), (Some(a), b));
        let first = format!("FOR VALUES FROM (MINVALUE) TO ('{}')", bound(b));
        assert_eq!(parse_bounds("x".into(), &first).unwrap().from, None);
        assert!(parse_bounds("x".into(), "DEFAULT").is_none());
    }

    #[test]
    fn a_bound_sorts_below_every_id_of_its_millisecond_and_above_the_one_before() {
        let event = crate::domain::EventId::generate().as_uuid();
        let millis = (event.as_u128() >> 80) as i64;
        assert!(bound(millis) <= event && event < bound(millis + 1));
        let job = crate::domain::JobId::for_event(crate::domain::EventId::from_uuid(event));
        assert!(bound(millis) <= job.as_uuid() && job.as_uuid() < bound(millis + 1));
    }
}
