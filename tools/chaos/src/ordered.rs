//! The ordered destination: each ingest process's source also routes events that carry
//! `data.object.customer` to destination `ordered`, which orders its jobs on that key. A
//! few keys per target are sent in turn, as a provider that sends one customer's events one
//! after another does: the next item of a key goes only after the previous one was
//! answered 2xx. A key whose item was never acknowledged stops there, since that item's
//! place in the line is then unknown (it may be stored after a later one).
//!
//! The checker then reads the sink's record of the `ordered` path, per key: every stored
//! item must first arrive after every earlier stored item of its key was answered 200, and
//! none may be missing. A repeat of an item after a later one's first arrival is an
//! at-least-once redelivery (a paused worker's stale attempt), counted, not a violation.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

use crate::check::DbState;
use crate::load::{EventRecord, Load, Target};
use crate::sink::{Answered, Delivery};

/// Keys per target (the PostgreSQL pair and the SQLite process).
pub const KEYS: usize = 6;
/// How often a key sends its next item, at most.
const EVERY: Duration = Duration::from_millis(300);
const PREFIX: &str = "evt_ord_";
/// The last segment of the `ordered` destination's URL.
pub const PATH_SUFFIX: &str = "/ordered";

/// The route and destination to add to a process's configuration, after its main source.
pub fn config_route() -> &'static str {
    r#"
[[sources.routes]]
destination = "ordered"
match = { data = { object = { customer = { "$exist" = true } } } }
ordering_key = "json:/data/object/customer"
"#
}

/// Sends the keys of `target` in turn until the load stops.
pub fn spawn_keys(load: &Arc<Load>, target: Target, seed: u64) -> Vec<tokio::task::JoinHandle<()>> {
    (0..KEYS)
        .map(|key| {
            let load = load.clone();
            tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(seed ^ key as u64);
                let mut tick = tokio::time::interval(EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                for n in 0u64.. {
                    tick.tick().await;
                    if load.stopped() {
                        return;
                    }
                    let label = target.label();
                    let id = format!("{PREFIX}{label}_{key:02}_{n:06}");
                    let body = Bytes::from(format!(
                        r#"{{"id":"{id}","object":"event","type":"chaos.ordered","data":{{"object":{{"customer":"{label}-{key}","n":{n}}}}}}}"#
                    ));
                    if !load.send_in_turn(id, target, body, rng.u64(..)).await {
                        return;
                    }
                }
            })
        })
        .collect()
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct OrderedFindings {
    pub keys: usize,
    pub items_stored: u64,
    pub arrivals: u64,
    /// Violations: an item first arriving before an earlier one of its key was answered 200.
    pub out_of_order: Vec<String>,
    /// Violations: a stored item of an ordered key that never arrived.
    pub missing: Vec<String>,
    /// Allowed, counted: an item arriving again after a later item of its key had arrived.
    pub late_redeliveries: u64,
}

impl OrderedFindings {
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        for (name, items) in [
            ("ordered destination: out of order", &self.out_of_order),
            ("ordered destination: never delivered", &self.missing),
        ] {
            if !items.is_empty() {
                let sample: Vec<&str> = items.iter().take(3).map(String::as_str).collect();
                v.push(format!(
                    "{name}: {} (e.g. {})",
                    items.len(),
                    sample.join("; ")
                ));
            }
        }
        v
    }

    pub fn line(&self) -> String {
        format!(
            "ordered destination: {} keys, {} items stored, {} arrivals, out of order (must be 0) {}, never delivered (must be 0) {}, late redeliveries {}",
            self.keys,
            self.items_stored,
            self.arrivals,
            self.out_of_order.len(),
            self.missing.len(),
            self.late_redeliveries
        )
    }
}

/// (key, n) of an ordered item's provider event id.
fn item(pid: &str) -> Option<(&str, u64)> {
    let rest = pid.strip_prefix(PREFIX)?;
    let (key, n) = rest.rsplit_once('_')?;
    Some((key, n.parse().ok()?))
}

/// Checks the `ordered` path's deliveries (in arrival order) against what each database
/// stored of the ordered items.
pub fn check(
    records: &HashMap<String, EventRecord>,
    deliveries: &[Delivery],
    pg: &DbState,
    lite: &DbState,
) -> OrderedFindings {
    let mut f = OrderedFindings::default();
    let mut expected: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (pid, rec) in records {
        let Some((key, n)) = item(pid) else { continue };
        let db = match rec.target {
            Target::Lite => lite,
            _ => pg,
        };
        if db.ids.contains_key(pid) {
            expected.entry(key).or_default().push(n);
            f.items_stored += 1;
        }
    }
    f.keys = expected.len();
    let mut arrivals: BTreeMap<&str, Vec<(u64, Answered)>> = BTreeMap::new();
    for d in deliveries {
        let Some((key, n)) = d.provider_event_id.as_deref().and_then(item) else {
            continue;
        };
        f.arrivals += 1;
        arrivals.entry(key).or_default().push((n, d.answered));
    }
    for (key, line) in &mut expected {
        line.sort_unstable();
        let seen = arrivals.get(key).map(Vec::as_slice).unwrap_or_default();
        f.late_redeliveries += check_key(key, line, seen, &mut f);
    }
    f
}

/// One key's arrivals against its stored items; returns its late redeliveries.
fn check_key(key: &str, stored: &[u64], seen: &[(u64, Answered)], f: &mut OrderedFindings) -> u64 {
    let mut succeeded: Vec<u64> = Vec::new();
    let mut first_seen: Vec<u64> = Vec::new();
    let mut late = 0;
    for &(n, answered) in seen {
        if first_seen.contains(&n) {
            late += u64::from(first_seen.iter().any(|&m| m > n));
        } else {
            let waiting: Vec<u64> = stored
                .iter()
                .copied()
                .filter(|&m| m < n && !succeeded.contains(&m))
                .collect();
            if !waiting.is_empty() {
                f.out_of_order.push(format!(
                    "{key}: item {n} arrived before {waiting:?} succeeded"
                ));
            }
            first_seen.push(n);
        }
        if answered == Answered::Ok {
            succeeded.push(n);
        }
    }
    for n in stored {
        if !succeeded.contains(n) {
            f.missing.push(format!("{key}: item {n}"));
        }
    }
    late
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stored: &[u64], seen: &[(u64, Answered)]) -> (OrderedFindings, u64) {
        let mut f = OrderedFindings::default();
        let late = check_key("k", stored, seen, &mut f);
        (f, late)
    }

    use Answered::{Fail500 as E, Ok as K};

    #[test]
    fn retries_and_a_clean_line_pass() {
        let (f, late) = run(&[0, 1, 2], &[(0, E), (0, K), (1, K), (2, E), (2, K)]);
        assert!(f.violations().is_empty(), "{f:?}");
        assert_eq!(late, 0);
    }

    #[test]
    fn an_item_before_its_predecessor_succeeded_is_a_violation() {
        let (f, _) = run(&[0, 1], &[(0, E), (1, K), (0, K)]);
        assert_eq!(f.out_of_order.len(), 1, "{f:?}");
        let (f, _) = run(&[0, 1, 2], &[(0, K), (2, K), (1, K)]);
        assert_eq!(f.out_of_order.len(), 1, "{f:?}");
    }

    #[test]
    fn a_missing_item_is_a_violation_and_a_late_repeat_is_counted() {
        let (f, _) = run(&[0, 1, 2], &[(0, K), (1, K)]);
        assert_eq!(f.missing, ["k: item 2"]);
        let (f, late) = run(&[0, 1], &[(0, K), (1, K), (0, K)]);
        assert!(f.violations().is_empty());
        assert_eq!(late, 1);
    }

    #[test]
    fn item_ids_parse() {
        assert_eq!(
            item("evt_ord_postgres_03_000012"),
            Some(("postgres_03", 12))
        );
        assert_eq!(item("evt_pg_00000001"), None);
    }
}
