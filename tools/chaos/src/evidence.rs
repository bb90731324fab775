//! What the hookgate processes logged about an unexplained duplicate, printed with a failing
//! report: the run directory, logs included, is removed after the run, and a CI log then
//! carries only what is printed. For each of the first few unexplained copies: every line
//! of every process's log that names its event, and the warnings and errors any process
//! logged from a second before the first of those lines to a lease after the last (those
//! of the processes that name the event first, a repeated warning once with its count).

use std::collections::HashSet;
use std::path::PathBuf;

use chrono::{DateTime, Utc};

/// Unexplained copies given evidence, at most.
const COPIES: usize = 3;
/// Lines printed per copy, at most.
const LINES: usize = 40;

/// The evidence for `unexplained` (each starting with its event id, as `duplicates` writes
/// them), from the logs of `slots` (name, log file). Empty when there is none to give.
pub fn for_unexplained(unexplained: &[String], slots: &[(String, PathBuf)], lease: f64) -> String {
    let logs: Vec<(&str, String)> = (slots.iter())
        .map(|(name, path)| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            (name.as_str(), text)
        })
        .collect();
    let mut seen = HashSet::new();
    let mut out = String::new();
    for copy in unexplained.iter().take(COPIES) {
        let Some(event) = copy.split_whitespace().next() else {
            continue;
        };
        if !seen.insert(event) {
            continue;
        }
        out.push_str(&format!("evidence    {copy}\n"));
        for line in lines_about(event, &logs, lease).into_iter().take(LINES) {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out
}

/// The lines naming `event`, then the warnings around them, each prefixed by its slot: first
/// those of the processes whose lines name the event, then the others'. A warning repeated
/// within one log (its text after the time, ids aside) is given once, with its count.
fn lines_about(event: &str, logs: &[(&str, String)], lease: f64) -> Vec<String> {
    let mut naming = Vec::new();
    let mut involved = HashSet::new();
    let (mut first, mut last) = (None::<DateTime<Utc>>, None::<DateTime<Utc>>);
    for (slot, text) in logs {
        for line in text.lines().filter(|l| l.contains(event)) {
            if let Some(at) = time_of(line) {
                first = Some(first.map_or(at, |f| f.min(at)));
                last = Some(last.map_or(at, |l| l.max(at)));
            }
            involved.insert(*slot);
            naming.push(format!("{slot}: {line}"));
        }
    }
    let (Some(first), Some(last)) = (first, last) else {
        return naming;
    };
    let from = first - chrono::Duration::seconds(1);
    let to = last + chrono::Duration::milliseconds((lease * 1000.0) as i64);
    let mut ordered: Vec<&(&str, String)> = logs.iter().collect();
    ordered.sort_by_key(|(slot, _)| !involved.contains(slot));
    for (slot, text) in ordered {
        // (message, first line, count), in order of first appearance.
        let mut warnings: Vec<(String, &str, usize)> = Vec::new();
        for line in text.lines().filter(|l| is_warning(l) && !l.contains(event)) {
            if !time_of(line).is_some_and(|at| at >= from && at <= to) {
                continue;
            }
            let message = message_of(line);
            match warnings.iter_mut().find(|(m, _, _)| *m == message) {
                Some((_, _, n)) => *n += 1,
                None => warnings.push((message, line, 1)),
            }
        }
        for (_, line, n) in warnings {
            let more = if n > 1 {
                format!(" (x{n})")
            } else {
                String::new()
            };
            naming.push(format!("{slot}: {line}{more}"));
        }
    }
    naming
}

/// A log line without its time and its `*_id=` fields, to tell repeats apart.
fn message_of(line: &str) -> String {
    let words = line.split_whitespace().skip(1);
    let kept: Vec<&str> = words.filter(|w| !w.contains("_id=")).collect();
    kept.join(" ")
}

/// The time a text log line starts with.
fn time_of(line: &str) -> Option<DateTime<Utc>> {
    let stamp = line.split_whitespace().next()?;
    DateTime::parse_from_rfc3339(stamp)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn is_warning(line: &str) -> bool {
    let mut words = line.split_whitespace();
    words.next();
    matches!(words.next(), Some("WARN" | "ERROR"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_gets_its_lines_then_the_warnings_around_them_its_processes_first() {
        let dir = std::env::temp_dir().join(format!("chaos-evidence-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let worker = dir.join("worker.log");
        let api = dir.join("api.log");
        std::fs::write(
            &worker,
            "2026-12-07T05:00:00.000000Z  WARN hookgate: long before\n\
             2026-12-07T05:00:10.000000Z  INFO hookgate::worker: delivery attempt event_id=e1 outcome=retry\n\
             2026-12-07T05:00:11.000000Z  INFO hookgate::worker: delivery attempt event_id=e2 outcome=succeeded\n\
             2026-12-07T05:00:13.000000Z  WARN hookgate::queue: lease renewal failed job_id=j1 error=pool timed out\n\
             2026-12-07T05:00:13.100000Z  WARN hookgate::queue: lease renewal failed job_id=j2 error=pool timed out\n",
        )
        .unwrap();
        std::fs::write(
            &api,
            "2026-12-07T05:00:12.000000Z  WARN hookgate::worker: could not record the outcome\n\
             2026-12-07T05:00:40.000000Z ERROR hookgate: long after\n",
        )
        .unwrap();
        // The api's log is read first; the worker's lines name the event.
        let slots = [("a".to_owned(), api), ("w".to_owned(), worker)];
        let copies = ["e1 to sink: attempt Some(1) at +10.0s: its lease never expired".to_owned()];
        let text = for_unexplained(&copies, &slots, 5.0);
        std::fs::remove_dir_all(&dir).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("evidence    e1 to sink"), "{text}");
        assert!(
            lines[1].starts_with("  w: 2026-12-07T05:00:10.000000Z  INFO"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("  w: 2026-12-07T05:00:13.000000Z  WARN")
                && lines[2].ends_with("pool timed out (x2)"),
            "the repeat is folded into the first: {text}"
        );
        assert!(
            lines[3].starts_with("  a: 2026-12-07T05:00:12.000000Z  WARN"),
            "{text}"
        );
        assert_eq!(lines.len(), 4, "{text}");
        for absent in ["e2", "long before", "long after"] {
            assert!(!text.contains(absent), "{absent}: {text}");
        }
    }
}
