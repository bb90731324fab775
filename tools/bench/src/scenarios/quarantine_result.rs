//! What the `quarantine-flood` scenario records, its ratios and its rows in bench/RESULTS.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::signatures::Segment;
use crate::markdown::{met, rate, ratio_range};

/// The target: valid ingest under a flood with the quarantine on, at least this share of
/// the same under the same flood with the quarantine off.
pub const TARGET: f64 = 0.90;

/// The legs, in the order of `FloodStore::legs`.
pub const ALONE: usize = 0;
pub const QUARANTINED: usize = 1;
pub const UNQUARANTINED: usize = 2;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct QuarantineFlood {
    pub stores: Vec<FloodStore>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FloodStore {
    /// "sqlite" or "pg".
    pub store: String,
    pub store_settings: String,
    pub concurrency: usize,
    /// Badly signed requests per second, open loop, during the flood legs.
    pub flood_rate: f64,
    pub flood_source: String,
    pub seconds_per_segment: f64,
    pub rounds: usize,
    /// The quarantine-on gateway's bounds.
    pub max_per_source: i64,
    pub max_bytes_per_source: i64,
    /// "alone", "flood+quarantine", "flood, no quarantine".
    pub legs: Vec<FloodLeg>,
    /// Valid events/s with the flood and the quarantine / with the flood and no quarantine.
    pub quarantined_to_unquarantined: f64,
    pub quarantined_to_unquarantined_rounds: Vec<f64>,
    /// Valid events/s with the flood and the quarantine / with no flood at all.
    pub quarantined_to_alone: f64,
    pub quarantined_to_alone_rounds: Vec<f64>,
    /// Gateway CPU per flood request beyond what the valid events cost (the valid events
    /// priced at the no-flood leg's CPU per event), without and with the quarantine.
    pub flood_cpu_us_per_request_unquarantined: f64,
    pub flood_cpu_us_per_request_quarantined: f64,
    /// The quarantine table of the quarantine-on store after the run, per source.
    pub kept: Vec<KeptRows>,
    /// Rows in the quarantine-off store's table (0 expected).
    pub kept_with_quarantine_off: u64,
    /// `hookgate_quarantine_requests_total` of the quarantine-on gateway by outcome, summed
    /// over sources, at the end of the run (warm-up included).
    pub outcomes: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FloodLeg {
    pub name: String,
    /// Whether the gateway of this leg has its quarantine on.
    pub quarantine: bool,
    pub flood: bool,
    /// The valid load's segments.
    pub segments: Vec<Segment>,
    /// Valid 2xx over the time of all its segments.
    pub throughput: f64,
    /// Answers to valid requests that were not 2xx, and connection errors.
    pub non_2xx: u64,
    pub conn_errors: u64,
    /// The gateway's CPU (user + system) over the segments per valid 2xx, flood included.
    pub cpu_us_per_event: f64,
    pub cpu_us_per_event_segments: Vec<f64>,
    /// Summed over the segments.
    pub cpu_seconds: f64,
    pub valid_ok: u64,
    /// Flood requests answered, their statuses, connection errors, and answers per second.
    pub flood_answered: u64,
    pub flood_statuses: BTreeMap<String, u64>,
    pub flood_conn_errors: u64,
    pub flood_answered_per_s: f64,
}

impl FloodLeg {
    /// Every valid request answered 2xx, and every flood request refused (never 2xx).
    pub fn clean(&self) -> bool {
        let flood_2xx: u64 = self
            .flood_statuses
            .iter()
            .filter(|(s, _)| s.starts_with('2'))
            .map(|(_, n)| n)
            .sum();
        self.non_2xx + self.conn_errors == 0 && self.valid_ok > 0 && flood_2xx == 0
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct KeptRows {
    pub source: String,
    pub rows: u64,
    pub body_bytes: u64,
}

/// `num`'s pooled rate over `den`'s, and the same round by round.
pub fn ratios(num: &FloodLeg, den: &FloodLeg) -> (f64, Vec<f64>) {
    let rounds = num
        .segments
        .iter()
        .zip(&den.segments)
        .map(|(n, d)| n.throughput / d.throughput.max(1e-9))
        .collect();
    (num.throughput / den.throughput.max(1e-9), rounds)
}

/// Pools a leg's segments into its rate and CPU per event.
pub fn pool(leg: &mut FloodLeg) {
    let ok: u64 = leg.segments.iter().map(|s| s.ok_2xx).sum();
    let secs: f64 = leg.segments.iter().map(|s| s.seconds).sum();
    leg.valid_ok = ok;
    leg.throughput = ok as f64 / secs.max(1e-9);
    leg.cpu_us_per_event = leg.cpu_seconds * 1e6 / ok.max(1) as f64;
    leg.flood_answered_per_s = leg.flood_answered as f64 / secs.max(1e-9);
}

/// The gateway CPU a flood leg spent beyond its valid events (priced at `alone`'s CPU per
/// event), per flood request answered.
pub fn flood_cpu_us_per_request(flood: &FloodLeg, alone: &FloodLeg) -> f64 {
    let beyond = flood.cpu_seconds * 1e6 - flood.valid_ok as f64 * alone.cpu_us_per_event;
    beyond / flood.flood_answered.max(1) as f64
}

impl QuarantineFlood {
    /// The details below bench/RESULTS.md's table: each leg's figures, per store.
    pub fn details(&self, s: &mut String) {
        if self.stores.is_empty() {
            return;
        }
        let _ = writeln!(
            s,
            "\nQuarantine flood, per leg (valid load at the fixed concurrency; the flood beside it on legs 2 and 3):\n\n| store | leg | valid events/s | per round | valid p99 (worst round) | gateway CPU per valid event | flood answered/s |\n| --- | --- | --- | --- | --- | --- | --- |"
        );
        for f in &self.stores {
            for l in &f.legs {
                let rounds: Vec<String> = l.segments.iter().map(|x| rate(x.throughput)).collect();
                let p99 = l.segments.iter().map(|x| x.p99_ms).fold(0.0, f64::max);
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {p99:.1} ms | {:.1} µs | {} |",
                    f.store_name(),
                    l.name,
                    rate(l.throughput),
                    rounds.join(", "),
                    l.cpu_us_per_event,
                    if l.flood {
                        rate(l.flood_answered_per_s)
                    } else {
                        "—".into()
                    }
                );
            }
        }
    }
}

impl FloodStore {
    /// Every source's kept rows and bytes within the bounds, something kept, nothing kept
    /// with the quarantine off.
    pub fn within_bounds(&self) -> bool {
        !self.kept.is_empty()
            && self.kept_with_quarantine_off == 0
            && self.kept.iter().all(|k| {
                k.rows as i64 <= self.max_per_source
                    && k.body_bytes as i64 <= self.max_bytes_per_source
            })
    }

    pub fn met(&self) -> bool {
        self.quarantined_to_unquarantined >= TARGET
            && self.within_bounds()
            && self.legs.len() == 3
            && self.legs.iter().all(FloodLeg::clean)
    }

    fn store_name(&self) -> &'static str {
        if self.store == "sqlite" {
            "SQLite"
        } else {
            "PostgreSQL"
        }
    }

    /// The row of bench/RESULTS.md's table.
    pub fn table_row(&self, s: &mut String) {
        let [alone, on, off] = &self.legs[..] else {
            return;
        };
        let kept = self
            .kept
            .iter()
            .map(|k| {
                format!(
                    "`{}` {} rows, {} KiB",
                    k.source,
                    rate(k.rows as f64),
                    k.body_bytes / 1024
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let outcomes = self
            .outcomes
            .iter()
            .map(|(o, n)| format!("{o} {}", rate(*n as f64)))
            .collect::<Vec<_>>()
            .join(", ");
        let unclean: Vec<&str> = self
            .legs
            .iter()
            .filter(|l| !l.clean())
            .map(|l| l.name.as_str())
            .collect();
        let unclean = if unclean.is_empty() {
            String::new()
        } else {
            format!("; **not clean: {}**", unclean.join(", "))
        };
        let _ = writeln!(
            s,
            "| Valid ingest under a flood of badly signed requests ({}/s to `{}`), quarantine on vs off, {}, alternated | ≥ {TARGET:.2}× | {} vs {} events/s at concurrency {} ({} rounds of {:.0} s, per round {}); no flood {} events/s, flood+quarantine / no flood {:.3}× (per round {}); gateway CPU per valid event {:.1} / {:.1} / {:.1} µs (no flood / quarantine / none), per flood request {:.1} µs with the quarantine, {:.1} µs without; flood answered {}/s ({}); quarantine after the run: {kept} (bounds {} rows, {} KiB); {} rows with it off; outcomes: {outcomes}{unclean}; {} | {:.3}× | {} |",
            rate(self.flood_rate),
            self.flood_source,
            self.store_name(),
            rate(on.throughput),
            rate(off.throughput),
            self.concurrency,
            self.rounds,
            self.seconds_per_segment,
            ratio_range(&self.quarantined_to_unquarantined_rounds),
            rate(alone.throughput),
            self.quarantined_to_alone,
            ratio_range(&self.quarantined_to_alone_rounds),
            alone.cpu_us_per_event,
            on.cpu_us_per_event,
            off.cpu_us_per_event,
            self.flood_cpu_us_per_request_quarantined,
            self.flood_cpu_us_per_request_unquarantined,
            rate(on.flood_answered_per_s),
            on.flood_statuses
                .iter()
                .map(|(st, n)| format!("{st}: {}", rate(*n as f64)))
                .collect::<Vec<_>>()
                .join(", "),
            rate(self.max_per_source as f64),
            self.max_bytes_per_source / 1024,
            self.kept_with_quarantine_off,
            self.store_settings,
            self.quarantined_to_unquarantined,
            met(self.met())
        );
    }
}

const COUNTER: &str = "hookgate_quarantine_requests_total{";

/// `hookgate_quarantine_requests_total` by outcome, summed over sources.
pub fn outcomes(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(COUNTER) else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let Some(outcome) = labels.split(',').find_map(|l| {
            l.trim()
                .strip_prefix("outcome=\"")
                .and_then(|v| v.strip_suffix('"'))
        }) else {
            continue;
        };
        let Ok(n) = value.trim().parse::<f64>() else {
            continue;
        };
        *out.entry(outcome.to_owned()).or_default() += n as u64;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leg(name: &str, rates: &[f64], cpu_seconds: f64, flood: u64) -> FloodLeg {
        let mut l = FloodLeg {
            name: name.into(),
            flood: flood > 0,
            segments: rates
                .iter()
                .enumerate()
                .map(|(round, r)| Segment {
                    round,
                    ok_2xx: (*r * 10.0) as u64,
                    seconds: 10.0,
                    throughput: *r,
                    ..Default::default()
                })
                .collect(),
            cpu_seconds,
            flood_answered: flood,
            flood_statuses: if flood > 0 {
                BTreeMap::from([("401".to_owned(), flood)])
            } else {
                BTreeMap::new()
            },
            ..Default::default()
        };
        pool(&mut l);
        l
    }

    #[test]
    fn ratios_pool_the_segments_and_pair_the_rounds() {
        let on = leg("on", &[900.0, 1_100.0], 0.0, 0);
        let off = leg("off", &[1_000.0, 1_000.0], 0.0, 0);
        let (pooled, rounds) = ratios(&on, &off);
        assert!((pooled - 1.0).abs() < 1e-9, "{pooled}");
        assert_eq!(rounds.len(), 2);
        assert!((rounds[0] - 0.9).abs() < 1e-9 && (rounds[1] - 1.1).abs() < 1e-9);
    }

    #[test]
    fn the_flood_is_priced_beyond_the_valid_events() {
        // 20,000 valid events at 100 µs alone: 2 s; the flood leg used 2.5 s for 20,000
        // valid events and 10,000 flood requests: 50 µs each.
        let alone = leg("alone", &[1_000.0, 1_000.0], 2.0, 0);
        assert!((alone.cpu_us_per_event - 100.0).abs() < 1e-9);
        let flood = leg("flood", &[1_000.0, 1_000.0], 2.5, 10_000);
        assert!((flood_cpu_us_per_request(&flood, &alone) - 50.0).abs() < 1e-6);
        assert!((flood.flood_answered_per_s - 500.0).abs() < 1e-9);
    }

    fn store(on_rate: f64, rows: u64) -> FloodStore {
        let legs = vec![
            leg("alone", &[1_000.0], 1.0, 0),
            leg("flood+quarantine", &[on_rate], 1.0, 100),
            leg("flood, no quarantine", &[950.0], 1.0, 100),
        ];
        let (r, rounds) = ratios(&legs[QUARANTINED], &legs[UNQUARANTINED]);
        FloodStore {
            store: "sqlite".into(),
            max_per_source: 500,
            max_bytes_per_source: 1 << 20,
            quarantined_to_unquarantined: r,
            quarantined_to_unquarantined_rounds: rounds,
            kept: vec![KeptRows {
                source: "stripe".into(),
                rows,
                body_bytes: rows * 512,
            }],
            legs,
            ..Default::default()
        }
    }

    fn row(s: &FloodStore) -> String {
        let mut out = String::new();
        s.table_row(&mut out);
        out
    }

    #[test]
    fn the_row_is_met_at_the_target_within_the_bounds() {
        let ok = row(&store(900.0, 500));
        assert!(ok.ends_with("| 0.947× | yes |\n"), "{ok}");
        assert!(ok.contains("`stripe` 500 rows, 250 KiB"), "{ok}");
        assert!(row(&store(800.0, 500)).ends_with("| **no** |\n"));
        assert!(row(&store(900.0, 501)).ends_with("| **no** |\n"));
        let mut accepted = store(900.0, 500);
        accepted.legs[QUARANTINED]
            .flood_statuses
            .insert("202".into(), 1);
        let text = row(&accepted);
        assert!(text.contains("not clean: flood+quarantine"), "{text}");
        assert!(text.ends_with("| **no** |\n"));
    }

    #[test]
    fn the_details_list_every_leg() {
        let mut s = String::new();
        QuarantineFlood {
            stores: vec![store(900.0, 500)],
        }
        .details(&mut s);
        assert_eq!(s.matches("| SQLite |").count(), 3, "{s}");
        assert!(s.contains("| flood+quarantine | 900 | 900 |"), "{s}");
    }

    #[test]
    fn outcomes_sum_the_counter_over_sources() {
        let text = "# HELP hookgate_quarantine_requests_total x\n\
            hookgate_quarantine_requests_total{source=\"stripe\",outcome=\"kept\"} 1280\n\
            hookgate_quarantine_requests_total{outcome=\"kept\",source=\"github\"} 20\n\
            hookgate_quarantine_requests_total{source=\"stripe\",outcome=\"dropped_full\"} 7\n\
            hookgate_ingest_requests_total{source=\"stripe\",outcome=\"kept\"} 99\n";
        let o = outcomes(text);
        assert_eq!(o.get("kept"), Some(&1_300));
        assert_eq!(o.get("dropped_full"), Some(&7));
        assert_eq!(o.len(), 2);
    }
}
