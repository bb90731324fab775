//! The database ceiling: pgbench running the ingest's SQL work as one transaction per event
//! (one events row of the same size, one jobs row), at the client count that suits it best.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

use crate::payload::{body, stored_headers_json, Scheme};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PgbenchResult {
    /// (clients, transactions per second) for every run.
    pub runs: Vec<(u32, f64)>,
    pub best_clients: u32,
    pub best_tps: f64,
    /// Client counts that could not run (e.g. the server had no connection slots left).
    pub failed: Vec<(u32, String)>,
    /// The most clients tried: the server's free connection slots, less headroom for others.
    pub client_cap: u32,
    pub seconds_per_run: u64,
    pub script: String,
}

/// A time-ordered UUID, like the gateway's UUIDv7 ids, so the primary-key indexes see the
/// same append pattern.
const V7ISH: &str =
    "(lpad(to_hex((extract(epoch from clock_timestamp()) * 1000)::bigint), 12, '0') \
    || substr(md5(random()::text), 1, 20))::uuid";

/// The script: one autocommit statement, so one transaction (and one commit flush) per
/// event. The provider event id is `evt_` and 24 random hex digits, like the load
/// generator's Stripe ids. Values that contain `:` are hex-encoded, since pgbench reads `:name` as a variable.
pub fn script(body_size: usize) -> String {
    let body = body(
        Scheme::Stripe,
        "evt_pgbench_000000000",
        1_700_000_000,
        body_size,
    );
    let headers = stored_headers_json(Scheme::Stripe, "evt_pgbench_000000000");
    format!(
        "WITH e AS (INSERT INTO events (id, tenant, source, provider_event_id, event_type, \
received_at, content_type, headers, body, verified_scheme, verified_secret_index) VALUES \
({V7ISH}, 'default', 'stripe', 'evt_' || substr(md5(random()::text), 1, 24), 'invoice.paid', now(), \
'application/json; charset=utf-8', convert_from(decode('{h}', 'hex'), 'UTF8')::jsonb, \
decode('{b}', 'hex'), 'stripe', 0) RETURNING id) \
INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, created_at, \
updated_at) SELECT {V7ISH}, id, 'sink', 'pending', 0, now(), now(), now() FROM e;\n",
        h = hex::encode(headers),
        b = hex::encode(body),
    )
}

/// Runs pgbench at each client count for `seconds` and keeps the best; when the best is the
/// largest count tried, doubles it until more clients stop helping or `cap` is reached.
/// A count that fails is recorded and skipped; only all of them failing is an error.
pub fn run(
    url: &str,
    work_dir: &Path,
    clients: &[u32],
    cap: u32,
    seconds: u64,
    body_size: usize,
) -> anyhow::Result<PgbenchResult> {
    let script_text = script(body_size);
    let path = work_dir.join("pgbench-ingest.sql");
    std::fs::write(&path, &script_text)?;
    let mut result = PgbenchResult {
        seconds_per_run: seconds,
        script: script_text,
        client_cap: cap,
        ..Default::default()
    };
    let mut todo: Vec<u32> = clients.iter().map(|&c| c.min(cap)).collect();
    todo.dedup();
    let mut next = 0;
    while next < todo.len() {
        let c = todo[next];
        next += 1;
        let out = Command::new("pgbench")
            .args(["-n", "-M", "prepared", "-j", "2", "-c"])
            .arg(c.to_string())
            .arg("-T")
            .arg(seconds.to_string())
            .arg("-f")
            .arg(&path)
            .arg(url)
            .output()
            .context("running pgbench (is it installed? /usr/bin/pgbench)")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tps = match parse_tps(&stdout) {
            Some(tps) if out.status.success() => tps,
            _ => {
                let why = stderr.lines().next().unwrap_or("no tps").to_owned();
                println!("    pgbench {c:>3} clients: failed: {why}");
                result.failed.push((c, format!("{stderr}{stdout}")));
                continue;
            }
        };
        println!("    pgbench {c:>3} clients: {tps:.0} tps");
        result.runs.push((c, tps));
        if tps > result.best_tps {
            result.best_tps = tps;
            result.best_clients = c;
        }
        if next == todo.len() && result.best_clients == c && c < cap {
            todo.push((c * 2).min(cap));
        }
    }
    if result.runs.is_empty() {
        bail!("every pgbench run failed: {:?}", result.failed);
    }
    Ok(result)
}

fn parse_tps(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pgbench_output() {
        let out = "number of failed transactions: 0 (0.000%)\nlatency average = 5.1 ms\n\
                   initial connection time = 3.2 ms\ntps = 1234.567 (without initial connection time)\n";
        assert_eq!(parse_tps(out), Some(1234.567));
    }

    #[test]
    fn the_script_has_no_pgbench_variables() {
        let s = script(512);
        // `::` casts are fine; a single `:` followed by a name would be a variable.
        let stripped = s.replace("::", "");
        assert!(!stripped.contains(':'), "{s}");
    }
}
