//! The report: one screen of text on stdout, and the same (plus the fault timeline and the
//! details of every violation) as markdown or JSON at `--report PATH`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::broker::BrokerFindings;
use crate::check::{AnswerCounts, DbState, Findings};
use crate::faults::FaultEvent;
use crate::procs::UnexpectedExit;
use crate::recovery::OnceFindings;

#[derive(Debug, Serialize)]
pub struct Report {
    pub verdict: &'static str,
    pub seed: u64,
    pub started_at: String,
    pub hookgate_bin: String,
    pub hookgate_revision: String,
    pub command: String,
    pub rate: f64,
    /// Building hookgate (0 with --hookgate-bin); not part of the other times.
    pub build_secs: f64,
    pub setup_secs: f64,
    pub load_secs: f64,
    pub settle_secs: f64,
    pub drain_secs: f64,
    pub total_secs: f64,
    pub findings: Findings,
    /// The non-retrying provider and reconciliation.
    pub once: OnceFindings,
    /// The `bus` destination's JetStream stream against the stored events.
    pub broker: BrokerFindings,
    /// The ordered destination: per-key order.
    pub ordered: crate::ordered::OrderedFindings,
    /// Every extra accepted copy (both sink destinations) and what explains it.
    pub duplicates: crate::duplicates::DuplicateFindings,
    /// Faults that waited for a reconciliation run to end; those that went ahead after the
    /// wait; whether faults could interrupt runs (`--interrupt-reconciliation`).
    pub spared: (u64, u64, bool),
    /// Requests the load generator sent to each ingest process: the PostgreSQL share is
    /// spread over both API processes.
    pub requests_by_process: BTreeMap<String, u64>,
    pub faults_total: u64,
    pub faults: BTreeMap<String, u64>,
    /// (slot, starts, failed starts)
    pub starts: Vec<(String, u32, u32)>,
    pub unexpected_exits: Vec<UnexpectedExit>,
    pub postgres: DbState,
    pub sqlite: DbState,
    pub violations: Vec<String>,
    pub warnings: Vec<String>,
    pub fault_log: Vec<FaultEvent>,
}

/// Requests sent (every attempt of every copy) per ingest process.
pub fn requests_by_process(
    records: &std::collections::HashMap<String, crate::load::EventRecord>,
) -> BTreeMap<String, u64> {
    let mut by = BTreeMap::new();
    for a in records.values().flat_map(|r| &r.attempts) {
        *by.entry(a.slot.clone()).or_default() += 1;
    }
    by
}

fn answers_line(c: &AnswerCounts) -> String {
    format!(
        "{}: 2xx {} (duplicate {}), 503 {}, connection errors {}, timeouts {}, other {}",
        c.requests, c.ok, c.ok_duplicate, c.unavailable, c.conn_errors, c.timeouts, c.other
    )
}

fn jobs_line(s: &DbState) -> String {
    let jobs: Vec<String> = s
        .jobs_by_status
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    format!("{} events, jobs: {}", s.events, jobs.join(", "))
}

/// The non-retrying provider's lines: what it produced, what the gateway missed, what
/// reconciliation recovered, and the reconciliation's API calls and recorded runs.
fn once_lines(w: &mut String, o: &OnceFindings) {
    let _ = writeln!(
        w,
        "non-retrying provider ({}, each event POSTed once, never retried): produced {}, not acknowledged by the gateway (lost to the provider) {}, recovered by reconciliation {}, never delivered (must be 0) {}",
        crate::load::ONCE_SOURCE,
        o.produced,
        o.not_acknowledged,
        o.recovered,
        o.never_delivered.len()
    );
    if o.recovered_while_posted > 0 {
        let _ = writeln!(
            w,
            "            {} of the recovered were listed while their POST was still under way (answered 2xx as a duplicate)",
            o.recovered_while_posted
        );
    }
    if o.not_acknowledged == 0 {
        let _ = writeln!(
            w,
            "            note: the gateway acknowledged every one, so the outage lost nothing to recover"
        );
    } else if o.stored_by_webhook_unacked > 0 {
        let _ = writeln!(
            w,
            "            of the unacknowledged, {} were stored by their webhook anyway (the answer was lost, not the commit)",
            o.stored_by_webhook_unacked
        );
    }
    if !o.reconciled {
        let _ = writeln!(
            w,
            "reconcile   OFF (--sabotage-no-reconcile): the source has no [sources.reconcile]"
        );
        return;
    }
    let a = &o.api;
    let s = &o.state;
    let _ = writeln!(
        w,
        "reconcile   fake Stripe API: {} list calls ({} events listed), {} unauthorized, {} bad requests; runs recorded {}: listed {}, missing {}, recovered {}, errors {}",
        a.list_calls,
        a.events_listed,
        a.unauthorized,
        a.bad_requests,
        s.runs,
        s.runs_listed,
        s.runs_missing,
        s.runs_recovered,
        s.runs_errors
    );
    if !o.never_delivered.is_empty() {
        if let Some(until) = s.lease_until {
            let _ = writeln!(
                w,
                "            the source's reconciliation lease is held until {until} (a run in progress, or one whose process died)"
            );
        }
    }
}

impl Report {
    /// The one-screen summary.
    pub fn text(&self) -> String {
        let f = &self.findings;
        let mut t = String::new();
        let w = &mut t;
        let _ = writeln!(
            w,
            "hookgate chaos run: {}   (seed {}; repeat with --seed {})",
            self.verdict, self.seed, self.seed
        );
        let _ = writeln!(
            w,
            "time        load {:.0}s, setup {:.1}s, settle {:.1}s, drain {:.1}s, total {:.1}s (+ build {:.1}s)",
            self.load_secs,
            self.setup_secs,
            self.settle_secs,
            self.drain_secs,
            self.total_secs,
            self.build_secs
        );
        let _ = writeln!(w, "under test  {}", self.hookgate_revision);
        let _ = writeln!(
            w,
            "processes   2 api + 2 worker on PostgreSQL (throwaway cluster, fsync on), 1 all-in-one on SQLite"
        );
        once_lines(w, &self.once);
        let b = &self.broker;
        let _ = writeln!(
            w,
            "broker      JetStream stream of the `bus` destination: {} messages for {} stored events; missing {}, on it more than once {}, of unstored events {}",
            b.messages,
            b.stored_events,
            b.missing.len(),
            b.duplicated.len(),
            b.unexpected.len()
        );
        let _ = writeln!(w, "            {}", self.ordered.line());
        let _ = writeln!(w, "duplicates  {}", self.duplicates.line());
        if self.once.reconciled {
            let (spared, gave_up, interrupt) = self.spared;
            let _ = writeln!(
                w,
                "{}",
                if interrupt {
                    "            faults could interrupt reconciliation runs (--interrupt-reconciliation)".to_owned()
                } else {
                    format!("            faults that waited for a reconciliation run to end: {spared} (went ahead after 3 s: {gave_up})")
                }
            );
        }
        let by_target: Vec<String> = f
            .events_by_target
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(
            w,
            "events      sent {} ({}) at {}/s; resent later {}, sent as concurrent copies {}",
            f.events_sent,
            by_target.join(", "),
            self.rate,
            f.resent_later,
            f.concurrent_copies
        );
        let _ = writeln!(w, "requests    {}", answers_line(&f.answers));
        for (k, c) in &f.answers_by_target {
            let _ = writeln!(w, "  {k:<9} {}", answers_line(c));
        }
        let spread: Vec<String> = (self.requests_by_process.iter())
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(w, "  by process {}", spread.join(", "));
        let _ = writeln!(
            w,
            "acked       {} events answered 2xx; {} never (the provider gave up, or did not retry), of which {} stored anyway (the answer was lost, not the commit; or reconciliation)",
            f.events_acked, f.events_never_acked, f.stored_never_acked
        );
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(
            w,
            "faults      {}: {}",
            self.faults_total,
            faults.join(", ")
        );
        let failed_starts: u32 = self.starts.iter().map(|s| s.2).sum();
        let _ = writeln!(
            w,
            "restarts    {} restarts, {} failed start attempts (database down), {} unexpected exits",
            self.starts.iter().map(|s| s.1.saturating_sub(1)).sum::<u32>(),
            failed_starts,
            self.unexpected_exits.len()
        );
        let _ = writeln!(
            w,
            "sink        {} requests: 200 {}, 500 {}, stalled {}",
            f.sink_requests, f.sink_ok, f.sink_500, f.sink_stalled
        );
        let _ = writeln!(w, "postgres    {}", jobs_line(&self.postgres));
        let _ = writeln!(w, "sqlite      {}", jobs_line(&self.sqlite));
        let _ = writeln!(w, "checker");
        let _ = writeln!(
            w,
            "  lost (acked 2xx, never delivered)      {}",
            f.lost.len()
        );
        let _ = writeln!(
            w,
            "  stored (not acked), never delivered    {}",
            f.stored_not_delivered.len()
        );
        let _ = writeln!(
            w,
            "  unexpected (delivered, never sent)     {}",
            f.unexpected.len()
        );
        let _ = writeln!(
            w,
            "  duplicated stored events               {}",
            f.duplicated_stored.len()
        );
        let _ = writeln!(
            w,
            "  duplicate deliveries to sink           {} events, {} extra copies, {}",
            f.duplicate_deliveries,
            f.extra_deliveries,
            if f.duplicate_deliveries_same_webhook_id {
                "each with the same webhook-id"
            } else {
                "WITH DIFFERENT webhook-ids"
            }
        );
        let _ = writeln!(
            w,
            "  duplicates unexplained (sink, ordered) {} of {} extra copies",
            self.duplicates.unexplained.len(),
            self.duplicates.extra
        );
        let _ = writeln!(
            w,
            "  jobs stuck / failed after drain        {} / {}",
            f.stuck_jobs, f.failed_jobs
        );
        let _ = writeln!(
            w,
            "  answers not 2xx/503/connection error   {}",
            f.bad_answers.len()
        );
        let _ = writeln!(
            w,
            "  non-retrying provider, never delivered {}",
            self.once.never_delivered.len()
        );
        let _ = writeln!(
            w,
            "  ordered destination, order violations  {}",
            self.ordered.out_of_order.len() + self.ordered.missing.len()
        );
        let others = f.acked_not_stored.len()
            + f.inconsistent_ids.len()
            + f.webhook_id_mismatch.len()
            + f.body_mismatch.len()
            + f.bad_signatures as usize
            + f.events_without_job as usize
            + f.answers.unavailable_without_retry_after as usize;
        let _ = writeln!(
            w,
            "  ids, bodies, signatures, orphan events {}",
            if others == 0 {
                "ok".to_owned()
            } else {
                format!("{others} problems")
            }
        );
        for v in &self.violations {
            let _ = writeln!(w, "VIOLATION   {v}");
        }
        for v in &self.warnings {
            let _ = writeln!(w, "warning     {v}");
        }
        let _ = writeln!(w, "verdict     {}", self.verdict);
        t
    }

    pub fn markdown(&self) -> String {
        let mut t = String::new();
        let w = &mut t;
        let _ = writeln!(w, "# hookgate chaos report\n");
        let _ = writeln!(
            w,
            "Run of `{}` started {} (seed {}). Produced by `hookgate-chaos` (see `tools/chaos/README.md`).\n",
            self.command, self.started_at, self.seed
        );
        let _ = writeln!(w, "```text\n{}```\n", self.text());
        let f = &self.findings;
        let details: [(&str, &Vec<String>); 14] = [
            (
                "Duplicate deliveries no fault explains",
                &self.duplicates.unexplained,
            ),
            ("Broker stream: stored events missing", &self.broker.missing),
            (
                "Broker stream: events more than once",
                &self.broker.duplicated,
            ),
            (
                "Broker stream: events never stored",
                &self.broker.unexpected,
            ),
            ("Lost", &f.lost),
            ("Acknowledged but not stored", &f.acked_not_stored),
            ("Stored but never delivered", &f.stored_not_delivered),
            ("Unexpected deliveries", &f.unexpected),
            ("Duplicated stored events", &f.duplicated_stored),
            (
                "Answers other than 2xx/503/connection error",
                &f.bad_answers,
            ),
            ("Inconsistent ids", &f.inconsistent_ids),
            ("webhook-id mismatches", &f.webhook_id_mismatch),
            ("Body mismatches", &f.body_mismatch),
            (
                "Non-retrying provider: produced, never delivered",
                &self.once.never_delivered,
            ),
        ];
        for (title, items) in details {
            if items.is_empty() {
                continue;
            }
            let _ = writeln!(w, "## {title} ({})\n", items.len());
            for i in items.iter().take(50) {
                let _ = writeln!(w, "- {i}");
            }
            let _ = writeln!(w);
        }
        for (label, s) in [("PostgreSQL", &self.postgres), ("SQLite", &self.sqlite)] {
            if !s.unfinished_examples.is_empty() {
                let _ = writeln!(w, "## {label}: jobs not succeeded\n");
                let _ = writeln!(w, "| provider event id | status | attempts | last error |");
                let _ = writeln!(w, "| --- | --- | --- | --- |");
                for (pid, status, attempts, err) in &s.unfinished_examples {
                    let _ = writeln!(
                        w,
                        "| {pid} | {status} | {attempts} | {} |",
                        err.as_deref().unwrap_or("")
                    );
                }
                let _ = writeln!(w);
            }
        }
        if !self.unexpected_exits.is_empty() {
            let _ = writeln!(w, "## Processes that exited on their own\n");
            for e in &self.unexpected_exits {
                let _ = writeln!(
                    w,
                    "- {} at +{:.1}s ({}); log ends:\n\n```text\n{}\n```\n",
                    e.slot, e.at_secs, e.status, e.log_tail
                );
            }
        }
        let _ = writeln!(w, "## Process starts\n");
        let _ = writeln!(w, "| process | starts | failed start attempts |");
        let _ = writeln!(w, "| --- | --- | --- |");
        for (name, starts, failed) in &self.starts {
            let _ = writeln!(w, "| {name} | {starts} | {failed} |");
        }
        let _ = writeln!(w, "\n## Fault timeline ({} faults)\n", self.fault_log.len());
        let _ = writeln!(w, "| at | fault | detail |");
        let _ = writeln!(w, "| --- | --- | --- |");
        for e in &self.fault_log {
            let _ = writeln!(
                w,
                "| +{:.1}s | {} | {} |",
                e.at_secs,
                e.kind,
                e.detail.replace('|', "/").replace('\n', " ")
            );
        }
        t
    }
}
