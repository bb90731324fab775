//! The checker, in the style of Jepsen's total-queue checker: what the load generator was
//! told (every attempt's answer), what the sink received, and what both databases hold.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr as _;

use serde::Serialize;
use sqlx::Connection as _;

use crate::load::{Copies, EventRecord, Outcome, Target};
use crate::sink::{Answered, Delivery};

/// The same queries on either backend (a macro: the row types differ per database).
macro_rules! read_state {
    ($conn:expr, $ids_sql:expr) => {{
        let conn = $conn;
        let ids: Vec<(String, String)> = sqlx::query_as($ids_sql).fetch_all(&mut *conn).await?;
        let duplicated_stored: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT source, provider_event_id, count(*) FROM events GROUP BY 1, 2 HAVING count(*) > 1",
        )
        .fetch_all(&mut *conn)
        .await?;
        let jobs_by_status: Vec<(String, i64)> =
            sqlx::query_as("SELECT status, count(*) FROM jobs GROUP BY status")
                .fetch_all(&mut *conn)
                .await?;
        let (events_without_job,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM events e WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.event_id = e.id)",
        )
        .fetch_one(&mut *conn)
        .await?;
        let (max_job_attempts,): (i64,) =
            sqlx::query_as("SELECT CAST(COALESCE(MAX(attempts), 0) AS BIGINT) FROM jobs")
                .fetch_one(&mut *conn)
                .await?;
        let unfinished_examples: Vec<(String, String, i64, Option<String>)> = sqlx::query_as(
            "SELECT e.provider_event_id, j.status, CAST(j.attempts AS BIGINT), j.last_error \
             FROM jobs j JOIN events e ON e.id = j.event_id WHERE j.status <> 'succeeded' \
             ORDER BY e.provider_event_id LIMIT 20",
        )
        .fetch_all(&mut *conn)
        .await?;
        DbState {
            events: ids.len() as u64,
            ids: ids.into_iter().collect(),
            duplicated_stored,
            jobs_by_status: jobs_by_status.into_iter().collect(),
            events_without_job,
            max_job_attempts,
            unfinished_examples,
        }
    }};
}

/// What one database holds after the drain.
#[derive(Debug, Default, Clone, Serialize)]
pub struct DbState {
    pub events: u64,
    /// provider event id -> hookgate event id.
    #[serde(skip)]
    pub ids: HashMap<String, String>,
    pub duplicated_stored: Vec<(String, String, i64)>,
    pub jobs_by_status: BTreeMap<String, i64>,
    pub events_without_job: i64,
    pub max_job_attempts: i64,
    /// Up to 20 jobs not `succeeded`: (provider event id, status, attempts, last error).
    pub unfinished_examples: Vec<(String, String, i64, Option<String>)>,
}

impl DbState {
    pub fn jobs(&self, status: &str) -> i64 {
        self.jobs_by_status.get(status).copied().unwrap_or(0)
    }

    pub async fn read_pg(url: &str) -> anyhow::Result<DbState> {
        let mut conn = sqlx::PgConnection::connect(url).await?;
        let s = read_state!(&mut conn, "SELECT provider_event_id, id::text FROM events");
        let _ = conn.close().await;
        Ok(s)
    }

    pub async fn read_sqlite(path: &std::path::Path) -> anyhow::Result<DbState> {
        let opts =
            sqlx::sqlite::SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
                .read_only(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&opts).await?;
        let s = read_state!(&mut conn, "SELECT provider_event_id, id FROM events");
        let _ = conn.close().await;
        Ok(s)
    }
}

/// Number of jobs still `pending` or `in_progress`.
pub async fn unfinished_pg(url: &str) -> anyhow::Result<i64> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let n =
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE status IN ('pending', 'in_progress')")
            .fetch_one(&mut conn)
            .await?;
    let _ = conn.close().await;
    Ok(n)
}

pub async fn unfinished_sqlite(path: &std::path::Path) -> anyhow::Result<i64> {
    let opts =
        sqlx::sqlite::SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
            .read_only(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&opts).await?;
    let n =
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE status IN ('pending', 'in_progress')")
            .fetch_one(&mut conn)
            .await?;
    let _ = conn.close().await;
    Ok(n)
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct AnswerCounts {
    pub requests: u64,
    pub ok: u64,
    pub ok_duplicate: u64,
    pub unavailable: u64,
    pub unavailable_without_retry_after: u64,
    pub conn_errors: u64,
    pub timeouts: u64,
    pub other: u64,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct Findings {
    // Load side.
    pub events_sent: u64,
    pub events_by_target: BTreeMap<String, u64>,
    pub resent_later: u64,
    pub concurrent_copies: u64,
    pub answers: AnswerCounts,
    pub answers_by_target: BTreeMap<String, AnswerCounts>,
    pub events_acked: u64,
    pub events_never_acked: u64,
    /// Events stored (and delivered) although no copy was ever answered 2xx (the commit
    /// happened, the answer was lost: allowed, and the provider's retry would be a duplicate).
    pub stored_never_acked: u64,
    // Sink side.
    pub sink_requests: u64,
    pub sink_ok: u64,
    pub sink_500: u64,
    pub sink_stalled: u64,
    // Violations.
    pub lost: Vec<String>,
    pub acked_not_stored: Vec<String>,
    /// Stored events (acknowledged or not) the sink never accepted: every stored event has
    /// jobs, so each must be delivered.
    pub stored_not_delivered: Vec<String>,
    pub unexpected: Vec<String>,
    pub duplicated_stored: Vec<String>,
    pub bad_answers: Vec<String>,
    pub inconsistent_ids: Vec<String>,
    pub webhook_id_mismatch: Vec<String>,
    pub bad_signatures: u64,
    pub body_mismatch: Vec<String>,
    pub stuck_jobs: i64,
    pub failed_jobs: i64,
    pub events_without_job: i64,
    // Allowed, counted.
    pub duplicate_deliveries: u64,
    pub extra_deliveries: u64,
    pub duplicate_deliveries_same_webhook_id: bool,
    pub max_job_attempts: i64,
}

impl Findings {
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut list = |name: &str, items: &[String]| {
            if !items.is_empty() {
                v.push(format!("{name}: {} (e.g. {})", items.len(), sample(items)));
            }
        };
        list("lost (2xx, never delivered)", &self.lost);
        list("acknowledged but not stored", &self.acked_not_stored);
        list("stored but never delivered", &self.stored_not_delivered);
        list("unexpected (delivered, never sent)", &self.unexpected);
        list("duplicated stored events", &self.duplicated_stored);
        list(
            "answers other than 2xx/503/connection error",
            &self.bad_answers,
        );
        list(
            "different hookgate ids for one provider event",
            &self.inconsistent_ids,
        );
        list(
            "deliveries whose webhook-id is not the event's id",
            &self.webhook_id_mismatch,
        );
        list(
            "delivered body differs from the sent body",
            &self.body_mismatch,
        );
        if self.bad_signatures > 0 {
            v.push(format!(
                "deliveries with a bad webhook-signature: {}",
                self.bad_signatures
            ));
        }
        if self.stuck_jobs > 0 {
            v.push(format!(
                "jobs still pending/in_progress after the drain: {}",
                self.stuck_jobs
            ));
        }
        if self.failed_jobs > 0 {
            v.push(format!("jobs failed (dead letters): {}", self.failed_jobs));
        }
        if self.events_without_job > 0 {
            v.push(format!(
                "stored events without a job: {}",
                self.events_without_job
            ));
        }
        if self.answers.unavailable_without_retry_after > 0 {
            v.push(format!(
                "503 answers without Retry-After: {}",
                self.answers.unavailable_without_retry_after
            ));
        }
        v
    }
}

fn sample(items: &[String]) -> String {
    let mut s: Vec<&str> = items.iter().take(3).map(String::as_str).collect();
    if items.len() > 3 {
        s.push("...");
    }
    s.join("; ")
}

pub fn check(
    records: &HashMap<String, EventRecord>,
    deliveries: &[Delivery],
    pg: &DbState,
    lite: &DbState,
) -> Findings {
    let mut f = Findings {
        duplicate_deliveries_same_webhook_id: true,
        ..Findings::default()
    };
    let db = |t: Target| match t {
        Target::Pg | Target::Once => pg,
        Target::Lite => lite,
    };

    // What the senders were told.
    let mut acked_id: HashMap<&str, String> = HashMap::new();
    let mut ids: Vec<&String> = records.keys().collect();
    ids.sort();
    for pid in ids {
        let rec = &records[pid];
        f.events_sent += 1;
        *f.events_by_target
            .entry(rec.target.label().to_owned())
            .or_default() += 1;
        match rec.copies {
            Copies::Once => {}
            Copies::ResentLater => f.resent_later += 1,
            Copies::Concurrent => f.concurrent_copies += 1,
        }
        let mut seen: HashSet<&str> = HashSet::new();
        for a in &rec.attempts {
            let by_target = f
                .answers_by_target
                .entry(rec.target.label().to_owned())
                .or_default();
            for c in [&mut f.answers, by_target] {
                c.requests += 1;
                match &a.outcome {
                    Outcome::Ok { duplicate, .. } => {
                        c.ok += 1;
                        c.ok_duplicate += u64::from(*duplicate);
                    }
                    Outcome::Unavailable { retry_after } => {
                        c.unavailable += 1;
                        c.unavailable_without_retry_after += u64::from(retry_after.is_none());
                    }
                    Outcome::ConnError { .. } => c.conn_errors += 1,
                    Outcome::Timeout => c.timeouts += 1,
                    Outcome::Other { .. } => c.other += 1,
                }
            }
            match &a.outcome {
                Outcome::Ok { id, .. } => {
                    seen.insert(id);
                }
                Outcome::Other { status, body } => f.bad_answers.push(format!(
                    "{pid} via {} at +{:.1}s: {status} {body}",
                    a.slot, a.at_secs
                )),
                _ => {}
            }
        }
        let stored = db(rec.target).ids.get(pid);
        if seen.is_empty() {
            f.events_never_acked += 1;
            if stored.is_some() {
                f.stored_never_acked += 1;
            }
            continue;
        }
        f.events_acked += 1;
        let mut seen: Vec<&str> = seen.into_iter().collect();
        seen.sort();
        if seen.len() > 1 {
            f.inconsistent_ids
                .push(format!("{pid}: answered with ids {}", seen.join(", ")));
        }
        match stored {
            None => f.acked_not_stored.push(pid.clone()),
            Some(sid) if !seen.contains(&sid.as_str()) => f.inconsistent_ids.push(format!(
                "{pid}: answered {} but stored as {sid}",
                seen.join(", ")
            )),
            Some(_) => {}
        }
        acked_id.insert(pid.as_str(), seen[0].to_owned());
    }

    // What the sink saw.
    let mut delivered: HashMap<&str, Vec<&Delivery>> = HashMap::new();
    for d in deliveries {
        f.sink_requests += 1;
        match d.answered {
            Answered::Ok => f.sink_ok += 1,
            Answered::Fail500 => f.sink_500 += 1,
            Answered::Stalled => f.sink_stalled += 1,
        }
        if !d.signature_ok {
            f.bad_signatures += 1;
        }
        let Some(pid) = d.provider_event_id.as_deref() else {
            f.unexpected.push(format!(
                "a delivery to {} without hookgate-provider-event-id (webhook-id {:?})",
                d.path, d.webhook_id
            ));
            continue;
        };
        let Some(rec) = records.get(pid) else {
            f.unexpected
                .push(format!("{pid} (delivered to {}, never sent)", d.path));
            continue;
        };
        if d.body != rec.body {
            f.body_mismatch
                .push(format!("{pid} (attempt {:?})", d.attempt));
        }
        let expected = db(rec.target).ids.get(pid);
        if d.webhook_id.as_ref() != expected {
            f.webhook_id_mismatch.push(format!(
                "{pid}: webhook-id {:?}, stored event id {:?}",
                d.webhook_id, expected
            ));
        }
        if d.answered == Answered::Ok {
            delivered.entry(pid).or_default().push(d);
        }
    }
    let mut unexpected_seen = HashSet::new();
    f.unexpected.retain(|u| unexpected_seen.insert(u.clone()));

    for (pid, webhook_id) in &acked_id {
        if !delivered.contains_key(pid) {
            f.lost.push(format!("{pid} (event {webhook_id})"));
        }
    }
    f.lost.sort();
    for (label, state) in [("postgres", pg), ("sqlite", lite)] {
        for (pid, eid) in &state.ids {
            if !delivered.contains_key(pid.as_str()) && !acked_id.contains_key(pid.as_str()) {
                f.stored_not_delivered
                    .push(format!("{label}: {pid} (event {eid})"));
            }
        }
    }
    f.stored_not_delivered.sort();
    for ds in delivered.values() {
        if ds.len() > 1 {
            f.duplicate_deliveries += 1;
            f.extra_deliveries += ds.len() as u64 - 1;
            let first = &ds[0].webhook_id;
            if ds.iter().any(|d| &d.webhook_id != first) {
                f.duplicate_deliveries_same_webhook_id = false;
            }
        }
    }

    for (label, state) in [("postgres", pg), ("sqlite", lite)] {
        for (source, pid, n) in &state.duplicated_stored {
            f.duplicated_stored
                .push(format!("{label}: {source}/{pid} stored {n} times"));
        }
        f.stuck_jobs += state.jobs("pending") + state.jobs("in_progress");
        f.failed_jobs += state.jobs("failed");
        f.events_without_job += state.events_without_job;
        f.max_job_attempts = f.max_job_attempts.max(state.max_job_attempts);
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Attempt;
    use bytes::Bytes;

    fn record(target: Target, body: &str, outcomes: Vec<Outcome>) -> EventRecord {
        EventRecord {
            target,
            copies: Copies::Once,
            body: Bytes::from(body.to_owned()),
            attempts: outcomes
                .into_iter()
                .map(|outcome| Attempt {
                    at_secs: 1.0,
                    slot: "pg-api-1".into(),
                    outcome,
                })
                .collect(),
            gave_up: 0,
        }
    }

    fn ok(id: &str, duplicate: bool) -> Outcome {
        Outcome::Ok {
            id: id.into(),
            duplicate,
        }
    }

    fn delivery(pid: &str, webhook_id: &str, body: &str, answered: Answered) -> Delivery {
        Delivery {
            path: "/postgres".into(),
            webhook_id: Some(webhook_id.into()),
            provider_event_id: Some(pid.into()),
            attempt: Some(1),
            answered,
            signature_ok: true,
            body: Bytes::from(body.to_owned()),
            at_secs: 2.0,
        }
    }

    fn db(pairs: &[(&str, &str)]) -> DbState {
        let mut s = DbState {
            events: pairs.len() as u64,
            ids: pairs
                .iter()
                .map(|(p, e)| (p.to_string(), e.to_string()))
                .collect(),
            ..DbState::default()
        };
        s.jobs_by_status
            .insert("succeeded".into(), pairs.len() as i64);
        s
    }

    /// Two events: a acked after a 503 and a connection error, b acked twice (duplicate).
    fn clean() -> (HashMap<String, EventRecord>, Vec<Delivery>, DbState) {
        let mut records = HashMap::new();
        records.insert(
            "a".to_owned(),
            record(
                Target::Pg,
                "A",
                vec![
                    Outcome::Unavailable {
                        retry_after: Some("1".into()),
                    },
                    Outcome::ConnError {
                        error: "reset".into(),
                    },
                    ok("ea", false),
                ],
            ),
        );
        records.insert(
            "b".to_owned(),
            record(Target::Pg, "B", vec![ok("eb", false), ok("eb", true)]),
        );
        let deliveries = vec![
            delivery("a", "ea", "A", Answered::Fail500),
            delivery("a", "ea", "A", Answered::Ok),
            delivery("b", "eb", "B", Answered::Ok),
        ];
        (records, deliveries, db(&[("a", "ea"), ("b", "eb")]))
    }

    #[test]
    fn a_clean_history_has_no_violation() {
        let (records, deliveries, pg) = clean();
        let f = check(&records, &deliveries, &pg, &DbState::default());
        assert_eq!(f.violations(), Vec::<String>::new());
        assert_eq!((f.events_sent, f.events_acked), (2, 2));
        assert_eq!(f.answers.requests, 5);
        assert_eq!(f.answers.unavailable, 1);
        assert_eq!(f.answers.conn_errors, 1);
        assert_eq!(f.duplicate_deliveries, 0);
    }

    #[test]
    fn an_acked_event_never_delivered_is_lost() {
        let (records, mut deliveries, pg) = clean();
        deliveries.retain(|d| d.provider_event_id.as_deref() != Some("b"));
        let f = check(&records, &deliveries, &pg, &DbState::default());
        assert_eq!(f.lost, vec!["b (event eb)".to_owned()]);
        assert_eq!(f.violations().len(), 1);
    }

    #[test]
    fn a_delivery_answered_500_is_not_a_delivery() {
        let (records, mut deliveries, pg) = clean();
        deliveries.remove(1);
        let f = check(&records, &deliveries, &pg, &DbState::default());
        assert_eq!(f.lost.len(), 1);
    }

    #[test]
    fn a_stored_but_unacknowledged_event_must_be_delivered_too() {
        let (mut records, deliveries, _) = clean();
        records.insert(
            "c".to_owned(),
            record(Target::Pg, "C", vec![Outcome::Timeout]),
        );
        let pg = db(&[("a", "ea"), ("b", "eb"), ("c", "ec")]);
        let f = check(&records, &deliveries, &pg, &DbState::default());
        assert_eq!(f.stored_not_delivered.len(), 1);
        assert_eq!(f.stored_never_acked, 1);
    }

    #[test]
    fn unknown_deliveries_are_unexpected() {
        let (records, mut deliveries, pg) = clean();
        deliveries.push(delivery("zzz", "ez", "Z", Answered::Ok));
        let f = check(&records, &deliveries, &pg, &DbState::default());
        assert_eq!(f.unexpected.len(), 1);
    }

    #[test]
    fn duplicate_deliveries_are_counted_and_must_share_the_webhook_id() {
        let (records, mut deliveries, pg) = clean();
        deliveries.push(delivery("b", "eb", "B", Answered::Ok));
        let f = check(&records, &deliveries, &pg, &DbState::default());
        assert!(f.violations().is_empty());
        assert_eq!((f.duplicate_deliveries, f.extra_deliveries), (1, 1));
        assert!(f.duplicate_deliveries_same_webhook_id);

        deliveries.push(delivery("b", "other", "B", Answered::Ok));
        let f = check(&records, &deliveries, &pg, &DbState::default());
        assert!(!f.duplicate_deliveries_same_webhook_id);
        assert_eq!(f.webhook_id_mismatch.len(), 1);
    }

    #[test]
    fn a_4xx_answer_or_a_different_id_is_a_violation() {
        let (mut records, deliveries, pg) = clean();
        records.get_mut("a").unwrap().attempts.push(Attempt {
            at_secs: 3.0,
            slot: "pg-api-2".into(),
            outcome: Outcome::Other {
                status: 401,
                body: "invalid_signature".into(),
            },
        });
        records.get_mut("b").unwrap().attempts.push(Attempt {
            at_secs: 3.0,
            slot: "pg-api-2".into(),
            outcome: ok("eb2", true),
        });
        let f = check(&records, &deliveries, &pg, &DbState::default());
        assert_eq!(f.bad_answers.len(), 1);
        assert_eq!(f.inconsistent_ids.len(), 1);
    }

    #[test]
    fn duplicated_rows_stuck_and_failed_jobs_are_violations() {
        let (records, deliveries, mut pg) = clean();
        pg.duplicated_stored
            .push(("stripe-pg".into(), "a".into(), 2));
        pg.jobs_by_status.insert("pending".into(), 1);
        pg.jobs_by_status.insert("failed".into(), 2);
        let f = check(&records, &deliveries, &pg, &DbState::default());
        assert_eq!(f.duplicated_stored.len(), 1);
        assert_eq!((f.stuck_jobs, f.failed_jobs), (1, 2));
        assert_eq!(f.violations().len(), 3);
    }
}
