//! Human output for the admin commands: the API's JSON read into local types, then tables.
//! Event fields come from webhook senders, i.e. from anyone on the internet, so every value
//! is escaped before it reaches a terminal.

use std::fmt::Write as _;
use std::io::Write as _;

use base64::Engine as _;
use serde::Deserialize;

/// The API's view types only serialise; these read them back, tolerating added fields.
#[derive(Debug, Deserialize)]
pub struct Page<T> {
    pub data: Vec<T>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct EventSummary {
    pub id: String,
    pub source: String,
    pub provider_event_id: String,
    pub event_type: Option<String>,
    pub received_at: String,
}

#[derive(Debug, Deserialize)]
pub struct Attempt {
    pub attempt: i64,
    pub worker_id: String,
    pub started_at: String,
    pub duration_ms: i64,
    pub status_code: Option<i64>,
    pub error: Option<String>,
    pub outcome: String,
}

#[derive(Debug, Deserialize)]
pub struct Job {
    pub id: String,
    pub event_id: String,
    pub destination: String,
    pub status: String,
    pub attempts: i64,
    pub next_attempt_at: String,
    pub last_error: Option<String>,
    pub updated_at: String,
    pub discarded_at: Option<String>,
    #[serde(default)]
    pub history: Option<Vec<Attempt>>,
}

#[derive(Debug, Deserialize)]
pub struct Header {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Deserialize)]
pub struct EventDetail {
    pub id: String,
    pub source: String,
    pub provider_event_id: String,
    pub event_type: Option<String>,
    pub received_at: String,
    pub content_type: Option<String>,
    pub headers: Vec<Header>,
    pub body_base64: String,
    pub body: Option<String>,
    pub verified_scheme: String,
    /// Absent from gateways that do not report it.
    #[serde(default)]
    pub verified_secret_index: Option<i32>,
    pub jobs: Vec<Job>,
}

#[derive(Debug, Deserialize)]
pub struct DeadLetter {
    #[serde(flatten)]
    pub job: Job,
    pub event: EventSummary,
}

#[derive(Debug, Deserialize)]
pub struct DryRunReply {
    pub matched: i64,
}

/// Terminal control characters (and bidi overrides, which can disguise text) as escapes.
fn escape(s: &str, keep_layout: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let bidi = matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
        if keep_layout && (c == '\n' || c == '\t') {
            out.push(c);
        } else if c.is_control() || bidi {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A value for one line of output.
pub fn clean(s: &str) -> String {
    escape(s, false)
}

fn cut(s: String, max: usize) -> String {
    if s.chars().count() <= max {
        return s;
    }
    let mut short: String = s.chars().take(max - 1).collect();
    short.push('…');
    short
}

/// `2024-05-01T12:00:00Z`: the API's nanoseconds only widen a table.
pub fn short_time(rfc3339: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .map(|t| {
            t.with_timezone(&chrono::Utc)
                .format("%Y-%m-%dT%H:%M:%SZ")
                .to_string()
        })
        .unwrap_or_else(|_| clean(rfc3339))
}

fn opt(v: &Option<String>) -> String {
    v.as_deref().map(clean).unwrap_or_else(|| "-".into())
}

/// Left-aligned columns separated by two spaces; the last column is not padded, so no line
/// ends in spaces.
pub fn table(headers: &[&str], rows: &[Vec<String>], indent: &str) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        out.push_str(indent);
        let last = row.len().saturating_sub(1);
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                let _ = write!(out, "{cell:<w$}  ");
            }
        }
        out.push('\n');
    }
    out
}

pub fn events_table(events: &[EventSummary]) -> String {
    if events.is_empty() {
        return "no events match\n".into();
    }
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                clean(&e.id),
                clean(&e.source),
                clean(&e.provider_event_id),
                opt(&e.event_type),
                short_time(&e.received_at),
            ]
        })
        .collect();
    table(
        &["ID", "SOURCE", "PROVIDER EVENT ID", "TYPE", "RECEIVED AT"],
        &rows,
        "",
    )
}

pub fn jobs_table(jobs: &[Job], indent: &str) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let status = match &j.discarded_at {
                Some(_) => format!("{} (discarded)", clean(&j.status)),
                None => clean(&j.status),
            };
            vec![
                clean(&j.id),
                clean(&j.destination),
                status,
                j.attempts.to_string(),
                short_time(&j.next_attempt_at),
                cut(opt(&j.last_error), 60),
            ]
        })
        .collect();
    table(
        &[
            "JOB ID",
            "DESTINATION",
            "STATUS",
            "ATTEMPTS",
            "NEXT ATTEMPT AT",
            "LAST ERROR",
        ],
        &rows,
        indent,
    )
}

fn history_table(history: &[Attempt], indent: &str) -> String {
    let rows: Vec<Vec<String>> = history
        .iter()
        .map(|a| {
            let result = match (a.status_code, &a.error) {
                (Some(code), _) => format!("HTTP {code}"),
                (None, Some(e)) => clean(e),
                (None, None) => "-".into(),
            };
            vec![
                a.attempt.to_string(),
                short_time(&a.started_at),
                format!("{} ms", a.duration_ms),
                clean(&a.outcome),
                clean(&a.worker_id),
                cut(result, 60),
            ]
        })
        .collect();
    table(
        &["#", "STARTED AT", "DURATION", "OUTCOME", "WORKER", "RESULT"],
        &rows,
        indent,
    )
}

/// Which of the source's secrets verified the event, counted from 0 as in the configuration.
fn secret_index(index: Option<i32>) -> String {
    match index {
        Some(0) => "0 (the first of the source's secrets)".to_owned(),
        Some(i) => format!("{i} (0 = the first of the source's secrets)"),
        None => "-".to_owned(),
    }
}

pub fn event_detail(e: &EventDetail) -> String {
    let mut out = String::new();
    let fields = [
        ("event", clean(&e.id)),
        ("source", clean(&e.source)),
        ("provider event id", clean(&e.provider_event_id)),
        ("type", opt(&e.event_type)),
        ("received at", short_time(&e.received_at)),
        ("content type", opt(&e.content_type)),
        ("verified by", clean(&e.verified_scheme)),
        ("verified secret", secret_index(e.verified_secret_index)),
    ];
    for (name, value) in fields {
        let _ = writeln!(out, "{name:<18} {value}");
    }
    out.push_str("headers:\n");
    for h in &e.headers {
        let _ = writeln!(out, "  {}: {}", clean(&h.name), clean(&h.value));
    }
    let size = base64::engine::general_purpose::STANDARD
        .decode(&e.body_base64)
        .map(|b| b.len())
        .unwrap_or(0);
    match &e.body {
        Some(text) => {
            let _ = writeln!(out, "body ({size} bytes):");
            for line in escape(text, true).lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
        None => {
            let _ = writeln!(
                out,
                "body ({size} bytes, not UTF-8; `events show --raw` writes them)"
            );
        }
    }
    if e.jobs.is_empty() {
        out.push_str("\nno delivery jobs\n");
        return out;
    }
    out.push_str("\njobs:\n");
    out.push_str(&jobs_table(&e.jobs, ""));
    for job in &e.jobs {
        if let Some(history) = job.history.as_deref().filter(|h| !h.is_empty()) {
            let _ = writeln!(
                out,
                "\n  attempts of job {} ({}):",
                clean(&job.id),
                clean(&job.destination)
            );
            out.push_str(&history_table(history, "    "));
        }
    }
    out
}

pub fn dead_letters_table(rows: &[DeadLetter]) -> String {
    if rows.is_empty() {
        return "no dead letters\n".into();
    }
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|d| {
            vec![
                clean(&d.job.id),
                clean(&d.job.destination),
                clean(&d.event.source),
                clean(&d.event.id),
                d.job.attempts.to_string(),
                cut(opt(&d.job.last_error), 60),
                short_time(&d.job.updated_at),
            ]
        })
        .collect();
    table(
        &[
            "JOB ID",
            "DESTINATION",
            "SOURCE",
            "EVENT ID",
            "ATTEMPTS",
            "LAST ERROR",
            "FAILED AT",
        ],
        &rows,
        "",
    )
}

/// A source as `GET /admin/v1/sources` describes it.
#[derive(Debug, Deserialize)]
pub struct Source {
    pub name: String,
    pub definition: String,
    pub event_id: Vec<String>,
    pub event_type: Vec<String>,
    pub algorithms: Vec<String>,
    pub handshakes: Vec<String>,
    pub secrets: u64,
}

pub fn sources_table(rows: &[Source]) -> String {
    if rows.is_empty() {
        return "no sources\n".into();
    }
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_owned()
        } else {
            clean(&v.join(" | "))
        }
    };
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|s| {
            vec![
                clean(&s.name),
                clean(&s.definition),
                list(&s.algorithms),
                s.secrets.to_string(),
                list(&s.event_id),
                list(&s.event_type),
                list(&s.handshakes),
            ]
        })
        .collect();
    table(
        &[
            "SOURCE",
            "PROVIDER",
            "SIGNATURE",
            "SECRETS",
            "EVENT ID FROM",
            "TYPE FROM",
            "HANDSHAKES",
        ],
        &rows,
        "",
    )
}

/// On stderr, so stdout holds only the rows.
pub fn more_hint(what: &str, next_cursor: Option<&str>) {
    if let Some(cursor) = next_cursor {
        eprintln!(
            "more {what}: pass --cursor {} for the next page, or --all",
            clean(cursor)
        );
    }
}

pub fn replayed_note(replayed: bool) {
    if replayed {
        eprintln!("this Idempotency-Key was used before: the saved answer is shown and nothing was done again");
    }
}

/// A reader that stopped early (`| head`) is not an error.
pub fn emit_bytes(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

pub fn emit_text(text: &str) -> anyhow::Result<()> {
    emit_bytes(text.as_bytes())
}

/// The API's JSON as it came, ending in a newline like any command output.
pub fn emit(json: &[u8]) -> anyhow::Result<()> {
    let mut bytes = json.to_vec();
    if bytes.last() != Some(&b'\n') {
        bytes.push(b'\n');
    }
    emit_bytes(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_terminal_controls_but_keeps_text() {
        assert_eq!(clean("evt_1"), "evt_1");
        assert_eq!(clean("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(clean("x\u{202E}y"), "x\\u{202e}y");
        assert_eq!(escape("a\n\tb\r", true), "a\n\tb\\r");
    }

    #[test]
    fn tables_align_and_do_not_pad_the_last_column() {
        let t = table(
            &["ID", "NAME"],
            &[
                vec!["1".into(), "a".into()],
                vec!["100".into(), "bb".into()],
            ],
            "  ",
        );
        assert_eq!(t, "  ID   NAME\n  1    a\n  100  bb\n");
    }

    #[test]
    fn times_lose_their_fraction() {
        assert_eq!(
            short_time("2024-05-01T12:00:00.123456789Z"),
            "2024-05-01T12:00:00Z"
        );
        assert_eq!(short_time("nonsense"), "nonsense");
    }
}
