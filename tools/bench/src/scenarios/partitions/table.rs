//! The scenario's rows in bench/RESULTS.md.

use super::*;

pub(super) fn mb(bytes: i64) -> String {
    format!("{:.1} MB", bytes as f64 / 1_048_576.0)
}

impl Partitions {
    fn side(&self, layout: Layout) -> Option<&RetentionSide> {
        self.retention.iter().find(|r| r.layout == layout)
    }

    pub fn table_rows(&self, s: &mut String) {
        use crate::markdown::{met, rate};
        use std::fmt::Write as _;
        let i = &self.ingest;
        let _ = writeln!(
            s,
            "| Ingest statement, time-partitioned layout vs unpartitioned (SQL level, {} writers, {}-event batches, {} alternated rounds) | ≥ 0.95× | {} vs {} events/s | {:.3}× | {} |",
            i.writers,
            i.batch,
            i.rounds,
            rate(i.new.events_per_s),
            rate(i.old.events_per_s),
            i.ratio,
            met(i.ratio >= 0.95)
        );
        if let (Some(o), Some(n)) = (
            self.side(Layout::Unpartitioned),
            self.side(Layout::Partitioned),
        ) {
            let _ = writeln!(
                s,
                "| Retention of one day ({} events of {} stored): partition drop + key deletes vs batched DELETE | (no target) | {:.2} s, {} WAL vs {:.2} s, {} WAL | {:.3}× time | |",
                rate(n.alone.events_removed as f64),
                rate(o.stored_events as f64),
                n.alone.seconds,
                mb(n.alone.wal_bytes),
                o.alone.seconds,
                mb(o.alone.wal_bytes),
                n.alone.seconds / o.alone.seconds.max(1e-9)
            );
        }
        if let Some(m) = &self.migration {
            let _ = writeln!(
                s,
                "| Migration to time partitions (`hookgate migrate`, one transaction) | (no target) | {:.1} s per million events ({:.1} s for {}) | | |",
                m.seconds_per_million_events,
                m.seconds,
                rate(m.events as f64)
            );
        }
    }

    pub fn details(&self, s: &mut String) {
        use crate::markdown::rate;
        use std::fmt::Write as _;
        let _ = writeln!(
            s,
            "\nTime partitions ({}; {} days of {} events, {}-byte bodies, one succeeded job and one attempt each; retention batch {}; the insert loop beside a removal: {} events/s):\n\n| layout | remove the oldest day | WAL | statements | next day under the loop | loop p99 / max during | loop p99 / max before |\n| --- | --- | --- | --- | --- | --- | --- |",
            self.method,
            self.days,
            rate(self.events_per_day as f64),
            self.body_bytes.min(64),
            self.retention_batch,
            rate(self.loop_events_per_s),
        );
        for r in &self.retention {
            let split = if r.layout == Layout::Partitioned {
                format!(
                    " (drop {:.3} s, {}; keys {:.2} s, {})",
                    r.alone.drop_seconds,
                    mb(r.alone.drop_wal_bytes),
                    r.alone.keys_seconds,
                    mb(r.alone.keys_wal_bytes)
                )
            } else {
                format!(" (slowest batch {:.0} ms)", r.alone.slowest_statement_ms)
            };
            let _ = writeln!(
                s,
                "| {} | {:.2} s{} | {} | {} | {:.2} s | {:.1} / {:.1} ms ({} statements) | {:.1} / {:.1} ms |",
                r.layout.name(),
                r.alone.seconds,
                split,
                mb(r.alone.wal_bytes),
                r.alone.statements,
                r.under_load.seconds,
                r.loop_during.p99_ms,
                r.loop_during.max_ms,
                r.loop_during.count,
                r.loop_baseline.p99_ms,
                r.loop_baseline.max_ms
            );
        }
        if let Some(m) = &self.migration {
            let _ = writeln!(
                s,
                "\nMigration `20261209000001` on the unpartitioned database ({} events, {} jobs, {} attempts, {:.0} MB): {:.1} s, {} WAL.",
                rate(m.events as f64),
                rate(m.jobs as f64),
                rate(m.attempts as f64),
                m.db_size_mb,
                m.seconds,
                mb(m.wal_bytes)
            );
        }
    }
}
