//! The results file (JSON, every figure) and the short markdown table for bench/RESULTS.md.

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::gateway::GatewayOpts;
use crate::scenarios::{
    backlog, brokers, delivery, e2e, ingest, partitions, quarantine_result, routes, signatures,
    sustained, topology,
};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
    pub postgres: String,
    pub hostname: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Results {
    pub started_at: String,
    pub finished_at: String,
    pub wall_seconds: f64,
    pub quick: bool,
    /// HEAD when the run started (the gateway binary may be older: see `gateway_built`).
    pub git: String,
    /// When the gateway binary under test was built (its modification time).
    pub gateway_built: String,
    pub machine: Machine,
    /// The PostgreSQL server: the suite's own cluster or an existing one, and its settings.
    pub pg_server: crate::server::ServerSetup,
    /// How the gateways were run (pool size, log filter, worker settings).
    pub gateway: Option<GatewayOpts>,
    pub concurrency: usize,
    pub body_size: usize,
    pub ingest_pg: Option<ingest::IngestPg>,
    pub ingest_sqlite: Option<ingest::IngestSqlite>,
    pub e2e: Option<e2e::E2e>,
    pub delivery: Option<delivery::Delivery>,
    pub sustained: Option<sustained::Sustained>,
    pub backlog: Option<backlog::Backlog>,
    pub signatures: Option<signatures::Signatures>,
    pub routes: Option<routes::Routes>,
    pub quarantine_flood: Option<quarantine_result::QuarantineFlood>,
    pub brokers: Option<brokers::Brokers>,
    pub topology: Option<topology::Topologies>,
    pub partitions: Option<partitions::Partitions>,
    pub partitions_gateway: Option<partitions::through_gateway::PartitionsGateway>,
    /// Scenarios that failed, with their error.
    pub errors: Vec<String>,
    /// When (and on which commit) each scenario ran: the same for all after a plain run,
    /// different after `all --only`.
    #[serde(default)]
    pub scenario_runs: std::collections::BTreeMap<String, String>,
}

/// Scenarios that never touch PostgreSQL (`signatures` by default measures SQLite; with
/// `--stores pg` its results name the server they ran on).
const NO_POSTGRES: &[&str] = &["ingest-sqlite", "signatures"];

impl Results {
    /// Takes from `old` the scenarios not in `rerun` (with their errors and run stamps).
    pub fn keep_others(&mut self, old: Results, rerun: &[String]) {
        let keep = |name: &str| !rerun.iter().any(|r| r == name);
        macro_rules! take {
            ($field:ident, $name:literal) => {
                if keep($name) {
                    self.$field = old.$field;
                }
            };
        }
        take!(ingest_pg, "ingest-pg");
        take!(ingest_sqlite, "ingest-sqlite");
        take!(delivery, "delivery");
        take!(sustained, "sustained");
        take!(e2e, "e2e");
        take!(backlog, "backlog");
        take!(signatures, "signatures");
        take!(routes, "routes");
        take!(quarantine_flood, "quarantine-flood");
        take!(brokers, "brokers");
        take!(topology, "topology");
        take!(partitions, "partitions");
        take!(partitions_gateway, "partitions-gateway");
        // Scenarios that use no PostgreSQL leave the header's server as the run that
        // measured the others described it.
        if rerun.iter().all(|r| NO_POSTGRES.contains(&r.as_str())) {
            self.pg_server = old.pg_server;
        }
        self.errors = old
            .errors
            .into_iter()
            .filter(|e| keep(e.split(':').next().unwrap_or("")))
            .collect();
        self.scenario_runs = old
            .scenario_runs
            .into_iter()
            .filter(|(name, _)| keep(name))
            .collect();
    }
}

fn first_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

pub fn machine(postgres: String) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        .unwrap_or_default();
    let mem_kb = mem_total_kb().unwrap_or(0) as f64;
    Machine {
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model,
        memory_gib: (mem_kb / 1_048_576.0 * 10.0).round() / 10.0,
        kernel: first_line("uname", &["-r"]),
        postgres,
        hostname: first_line("hostname", &[]),
    }
}

/// MemTotal from /proc/meminfo.
pub fn mem_total_kb() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

pub fn git_describe() -> String {
    let head = first_line("git", &["rev-parse", "--short", "HEAD"]);
    let dirty =
        !first_line("git", &["status", "--porcelain", "--", "src", "Cargo.toml"]).is_empty();
    if dirty {
        format!("{head} + uncommitted changes")
    } else {
        head
    }
}

pub fn save_json(results: &Results, path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(results)? + "\n")?;
    Ok(())
}

pub fn load_json(path: &Path) -> anyhow::Result<Results> {
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

/// Text below this line of bench/RESULTS.md is kept when the table is regenerated.
pub const FINDINGS_MARKER: &str = "<!-- findings: text below this line is kept by bench/run.sh -->";

/// Writes the markdown table to `path`, keeping whatever follows the findings marker.
pub fn write_markdown(results: &Results, path: &Path) -> anyhow::Result<()> {
    let kept = std::fs::read_to_string(path)
        .ok()
        .and_then(|old| old.split_once(FINDINGS_MARKER).map(|(_, k)| k.to_owned()))
        .unwrap_or_else(|| "\n\n## Findings\n\n(none recorded yet)\n".to_owned());
    let text = format!(
        "{}\n{FINDINGS_MARKER}{kept}",
        crate::markdown::render(results)
    );
    std::fs::write(path, text)?;
    Ok(())
}
