//! The `topology` scenario's rows in bench/RESULTS.md: one per split topology against the
//! all-in-one, and the topologies side by side.

use std::fmt::Write as _;

use super::topology::{Topologies, TopologyRun};
use crate::markdown::{met, rate, ratio_range};

impl Topologies {
    /// One table row per split topology, against the all-in-one.
    pub fn table_rows(&self, s: &mut String) {
        let Some(base) = self.runs.first() else {
            return;
        };
        for r in &self.runs[1..] {
            let _ = writeln!(
                s,
                "| {} vs all-in-one on one PostgreSQL (load spread over the api processes), {} alternated rounds | correct; overhead measured (no target) | ingest {} vs {} events/s{}, delivery {} vs {} /s; at {}/s ingest p99 {:.2} vs {:.2} ms, end-to-end p50 {:.2} vs {:.2} ms; {} | ingest {:.2}×, delivery {:.2}× | {} |",
                r.name,
                self.rounds,
                rate(r.ingest_per_s),
                rate(base.ingest_per_s),
                per_round(&r.ingest_ratio_rounds),
                rate(r.delivery_per_s),
                rate(base.delivery_per_s),
                rate(self.rate),
                r.ingest_p99_ms,
                base.ingest_p99_ms,
                r.e2e_p50_ms,
                base.e2e_p50_ms,
                correctness(r),
                r.ingest_per_s / base.ingest_per_s,
                r.delivery_per_s / base.delivery_per_s,
                met(r.correct() && base.correct())
            );
        }
    }

    /// The topologies side by side, with every ratio to the all-in-one and to 1 + 1.
    pub fn details(&self, s: &mut String) {
        let (Some(base), Some(one)) = (self.runs.first(), self.runs.get(1)) else {
            return;
        };
        let _ = writeln!(
            s,
            "\nTopologies on one PostgreSQL ({} rounds, {} s runs, concurrency {} spread over the api processes, then {}/s: {}; means over the rounds):\n\n| processes | ingest | delivery | CPU per event | commits / WAL syncs per event | ingest p50 / p99 | end-to-end p50 / p99 | vs all-in-one: ingest, delivery, CPU, e2e p50 / p99 | vs 1 + 1: ingest, delivery | missing, duplicates, non-2xx |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            self.rounds,
            self.seconds,
            self.concurrency,
            rate(self.rate),
            self.rate_from
        );
        for r in &self.runs {
            let x = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
            let _ = writeln!(
                s,
                "| {} | {}/s | {}/s | {:.1} µs | {:.3} / {:.3} | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.2}×, {:.2}×, {:.2}×, {:.2}× / {:.2}× | {:.2}×, {:.2}× | {}, {}, {} |",
                r.name,
                rate(r.ingest_per_s),
                rate(r.delivery_per_s),
                r.cpu_us_per_event,
                r.commits_per_event,
                r.wal_syncs_per_event,
                r.ingest_p50_ms,
                r.ingest_p99_ms,
                r.e2e_p50_ms,
                r.e2e_p99_ms,
                x(r.ingest_per_s, base.ingest_per_s),
                x(r.delivery_per_s, base.delivery_per_s),
                x(r.cpu_us_per_event, base.cpu_us_per_event),
                x(r.e2e_p50_ms, base.e2e_p50_ms),
                x(r.e2e_p99_ms, base.e2e_p99_ms),
                x(r.ingest_per_s, one.ingest_per_s),
                x(r.delivery_per_s, one.delivery_per_s),
                r.missing,
                r.duplicates,
                r.non_2xx
            );
        }
    }
}

fn per_round(ratios: &[f64]) -> String {
    if ratios.is_empty() {
        String::new()
    } else {
        format!(" (per round {})", ratio_range(ratios))
    }
}

fn correctness(r: &TopologyRun) -> String {
    let mut s = format!(
        "{} missing, {} delivered twice, {} non-2xx",
        r.missing, r.duplicates, r.non_2xx
    );
    if !r.kept_up {
        s.push_str("; the fixed-rate run fell behind");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, ingest: f64, missing: u64) -> TopologyRun {
        TopologyRun {
            name: name.into(),
            ingest_per_s: ingest,
            delivery_per_s: ingest / 2.0,
            missing,
            kept_up: true,
            ..Default::default()
        }
    }

    #[test]
    fn rows_give_the_ratios_and_fail_on_a_lost_event() {
        let t = Topologies {
            rounds: 2,
            runs: vec![
                run("all-in-one", 10_000.0, 0),
                run("1 api + 1 worker", 9_000.0, 0),
                run("2 api + 2 worker", 8_000.0, 3),
            ],
            ..Default::default()
        };
        let mut s = String::new();
        t.table_rows(&mut s);
        let rows: Vec<&str> = s.lines().collect();
        assert_eq!(rows.len(), 2, "{s}");
        assert!(rows[0].contains("ingest 0.90×, delivery 0.90×"), "{s}");
        assert!(rows[0].ends_with("| yes |"), "{s}");
        assert!(rows[1].contains("3 missing"), "{s}");
        assert!(rows[1].ends_with("| **no** |"), "{s}");
    }
}
