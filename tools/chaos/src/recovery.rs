//! The non-retrying provider's checks: every event it produced (whether or not its one POST
//! was acknowledged) must reach the sink, through its webhook or through reconciliation
//! against the fake provider API. Also what the drain waits for: every produced event stored.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use sqlx::Connection as _;

use crate::load::{EventRecord, Outcome, Target, ONCE_SOURCE};
use crate::provider_api::ApiCounts;
use crate::sink::{Answered, Delivery};

/// What PostgreSQL holds about the non-retrying provider's source after the drain.
#[derive(Debug, Default, Clone, Serialize)]
pub struct RecoveryState {
    /// Provider event ids stored for the source.
    #[serde(skip)]
    pub stored: HashSet<String>,
    /// Of those, the ones ingested from the provider API (`verified_scheme = 'stripe-api'`).
    #[serde(skip)]
    pub from_api: HashSet<String>,
    /// Recorded runs, and their totals.
    pub runs: i64,
    pub runs_listed: i64,
    pub runs_missing: i64,
    pub runs_recovered: i64,
    pub runs_errors: i64,
    /// The lease still held when the state was read (a run in progress, or a crashed one).
    pub lease_until: Option<chrono::DateTime<chrono::Utc>>,
}

impl RecoveryState {
    pub async fn read(url: &str) -> anyhow::Result<RecoveryState> {
        let mut conn = sqlx::PgConnection::connect(url).await?;
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT provider_event_id, verified_scheme FROM events WHERE source = $1",
        )
        .bind(ONCE_SOURCE)
        .fetch_all(&mut conn)
        .await?;
        let (runs, runs_listed, runs_missing, runs_recovered, runs_errors): (
            i64,
            i64,
            i64,
            i64,
            i64,
        ) = sqlx::query_as(
            "SELECT count(*), CAST(COALESCE(sum(listed), 0) AS BIGINT), \
             CAST(COALESCE(sum(missing), 0) AS BIGINT), CAST(COALESCE(sum(recovered), 0) AS BIGINT), \
             CAST(COALESCE(sum(errors), 0) AS BIGINT) FROM reconciliation_runs WHERE source = $1",
        )
        .bind(ONCE_SOURCE)
        .fetch_one(&mut conn)
        .await?;
        let lease_until: Option<(Option<chrono::DateTime<chrono::Utc>>,)> =
            sqlx::query_as("SELECT lease_until FROM reconciliation_state WHERE source = $1")
                .bind(ONCE_SOURCE)
                .fetch_optional(&mut conn)
                .await?;
        let _ = conn.close().await;
        let mut s = RecoveryState {
            runs,
            runs_listed,
            runs_missing,
            runs_recovered,
            runs_errors,
            lease_until: lease_until.and_then(|r| r.0),
            ..RecoveryState::default()
        };
        for (pid, scheme) in rows {
            if scheme == "stripe-api" {
                s.from_api.insert(pid.clone());
            }
            s.stored.insert(pid);
        }
        Ok(s)
    }
}

/// Until when the source's reconciliation lease is held, if it is: by a run in progress, or
/// by one whose process died mid-run (then no other run starts before it expires).
pub async fn lease_until(url: &str) -> anyhow::Result<Option<chrono::DateTime<chrono::Utc>>> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let row: Option<(Option<chrono::DateTime<chrono::Utc>>,)> =
        sqlx::query_as("SELECT lease_until FROM reconciliation_state WHERE source = $1")
            .bind(ONCE_SOURCE)
            .fetch_optional(&mut conn)
            .await?;
    let _ = conn.close().await;
    Ok(row.and_then(|r| r.0).filter(|t| *t > chrono::Utc::now()))
}

/// How many of the produced ids are not stored yet: the drain waits for 0.
pub async fn unstored(url: &str, produced: &[String]) -> anyhow::Result<usize> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let stored: Vec<(String,)> =
        sqlx::query_as("SELECT provider_event_id FROM events WHERE source = $1")
            .bind(ONCE_SOURCE)
            .fetch_all(&mut conn)
            .await?;
    let _ = conn.close().await;
    let stored: HashSet<String> = stored.into_iter().map(|(p,)| p).collect();
    Ok(produced.iter().filter(|p| !stored.contains(*p)).count())
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct OnceFindings {
    /// Whether the source was reconciled (off only in the checker's self-test).
    pub reconciled: bool,
    pub produced: u64,
    /// The one POST was answered 2xx.
    pub acknowledged: u64,
    /// Not answered 2xx (connection refused, a 503, a timeout): lost to the provider.
    pub not_acknowledged: u64,
    /// Not acknowledged, but stored by the webhook anyway (the commit happened, the answer
    /// was lost).
    pub stored_by_webhook_unacked: u64,
    /// Stored from the provider API by reconciliation.
    pub recovered: u64,
    /// Of those, the ones whose POST was acknowledged all the same (as a duplicate: the
    /// listing came while the POST waited).
    pub recovered_while_posted: u64,
    /// Produced, never accepted by the sink: a violation.
    pub never_delivered: Vec<String>,
    pub api: ApiCounts,
    pub state: RecoveryState,
}

impl OnceFindings {
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        if !self.never_delivered.is_empty() {
            let mut sample: Vec<&str> = self
                .never_delivered
                .iter()
                .take(3)
                .map(String::as_str)
                .collect();
            if self.never_delivered.len() > 3 {
                sample.push("...");
            }
            v.push(format!(
                "non-retrying provider: produced, never delivered: {} (e.g. {})",
                self.never_delivered.len(),
                sample.join("; ")
            ));
        }
        v
    }
}

pub fn check_once(
    records: &HashMap<String, EventRecord>,
    deliveries: &[Delivery],
    state: RecoveryState,
    api: ApiCounts,
    reconciled: bool,
) -> OnceFindings {
    let accepted: HashSet<&str> = deliveries
        .iter()
        .filter(|d| d.answered == Answered::Ok)
        .filter_map(|d| d.provider_event_id.as_deref())
        .collect();
    let mut f = OnceFindings {
        reconciled,
        api,
        ..OnceFindings::default()
    };
    let mut ids: Vec<&String> = records
        .iter()
        .filter(|(_, r)| r.target == Target::Once)
        .map(|(id, _)| id)
        .collect();
    ids.sort();
    for pid in ids {
        let rec = &records[pid];
        f.produced += 1;
        let acked = rec
            .attempts
            .iter()
            .any(|a| matches!(a.outcome, Outcome::Ok { .. }));
        let from_api = state.from_api.contains(pid);
        if acked {
            f.acknowledged += 1;
        } else {
            f.not_acknowledged += 1;
            if state.stored.contains(pid) && !from_api {
                f.stored_by_webhook_unacked += 1;
            }
        }
        if from_api {
            f.recovered += 1;
            f.recovered_while_posted += u64::from(acked);
        }
        if !accepted.contains(pid.as_str()) {
            let how = match (acked, state.stored.contains(pid)) {
                (true, _) => "acknowledged",
                (false, true) => "not acknowledged, stored",
                (false, false) => "not acknowledged, never stored",
            };
            f.never_delivered.push(format!("{pid} ({how})"));
        }
    }
    f.state = state;
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{Attempt, Copies};
    use bytes::Bytes;

    fn once(outcome: Outcome) -> EventRecord {
        EventRecord {
            target: Target::Once,
            copies: Copies::Once,
            body: Bytes::from_static(b"{}"),
            attempts: vec![Attempt {
                at_secs: 1.0,
                slot: "pg-api-1".into(),
                outcome,
            }],
            gave_up: 0,
        }
    }

    fn delivered(pid: &str) -> Delivery {
        Delivery {
            path: "/postgres".into(),
            webhook_id: Some(format!("e-{pid}")),
            provider_event_id: Some(pid.into()),
            attempt: Some(1),
            answered: Answered::Ok,
            signature_ok: true,
            body: Bytes::from_static(b"{}"),
            at_secs: 2.0,
        }
    }

    fn refused() -> Outcome {
        Outcome::ConnError {
            error: "connection refused".into(),
        }
    }

    /// a: acknowledged; b: refused, recovered from the API; c: timed out but committed.
    fn history() -> (HashMap<String, EventRecord>, Vec<Delivery>, RecoveryState) {
        let mut records = HashMap::new();
        records.insert(
            "a".into(),
            once(Outcome::Ok {
                id: "e-a".into(),
                duplicate: false,
            }),
        );
        records.insert("b".into(), once(refused()));
        records.insert("c".into(), once(Outcome::Timeout));
        let state = RecoveryState {
            stored: ["a", "b", "c"].map(String::from).into(),
            from_api: ["b"].map(String::from).into(),
            ..RecoveryState::default()
        };
        let deliveries = vec![delivered("a"), delivered("b"), delivered("c")];
        (records, deliveries, state)
    }

    #[test]
    fn recovered_events_count_and_nothing_is_missing() {
        let (records, deliveries, state) = history();
        let f = check_once(&records, &deliveries, state, ApiCounts::default(), true);
        assert_eq!(
            (f.produced, f.acknowledged, f.not_acknowledged, f.recovered),
            (3, 1, 2, 1)
        );
        assert_eq!(f.stored_by_webhook_unacked, 1);
        assert!(f.violations().is_empty());
    }

    #[test]
    fn an_event_lost_to_the_provider_and_never_recovered_is_a_violation() {
        let (mut records, deliveries, state) = history();
        records.insert("d".into(), once(refused()));
        let f = check_once(&records, &deliveries, state, ApiCounts::default(), false);
        assert_eq!(f.never_delivered, ["d (not acknowledged, never stored)"]);
        assert_eq!(f.violations().len(), 1);
    }

    #[test]
    fn only_a_delivery_the_sink_accepted_counts() {
        let (records, mut deliveries, state) = history();
        deliveries[1].answered = Answered::Fail500;
        let f = check_once(&records, &deliveries, state, ApiCounts::default(), true);
        assert_eq!(f.never_delivered, ["b (not acknowledged, stored)"]);
    }

    #[test]
    fn other_targets_are_not_the_non_retrying_providers() {
        let (mut records, deliveries, state) = history();
        let mut pg = once(refused());
        pg.target = Target::Pg;
        records.insert("p".into(), pg);
        let f = check_once(&records, &deliveries, state, ApiCounts::default(), true);
        assert_eq!(f.produced, 3);
        assert!(f.never_delivered.is_empty());
    }
}
