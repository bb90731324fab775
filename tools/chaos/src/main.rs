//! hookgate-chaos: the chaos harness (see tools/chaos/README.md). It runs real hookgate processes
//! (two API and two worker processes on a throwaway PostgreSQL cluster, one all-in-one on
//! SQLite), a recording sink and a load generator, injects faults while the load runs, then
//! stops the faults, drains the queues and checks that nothing acknowledged was lost, and
//! that reconciliation against a fake provider API recovered every event a non-retrying
//! provider sent while the gateway was down.

mod broker;
mod check;
mod config;
mod drain;
mod duplicates;
mod evidence;
mod faults;
mod load;
mod ordered;
mod procs;
mod provider_api;
mod recovery;
mod report;
mod sink;
mod workdir;

use hookgate_pgcluster as cluster;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Parser;

use crate::cluster::{Cluster, DB_NAME};
use crate::config::{
    migrate, render_config, retry_schedule, ConfigParams, OnceSource, DEST_SECRET,
};
use crate::faults::{FaultOpts, Faults};
use crate::load::{Load, LoadOpts, LITE_SOURCE, PG_SOURCE};
use crate::procs::{Kind, Procs, SlotSpec};
use crate::provider_api::ProviderApi;
use crate::report::Report;
use crate::sink::Sink;
use crate::workdir::WorkDir;

/// The gateway's package: the workspace root, two levels above this crate (tools/chaos).
const GATEWAY_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// How long the sink holds a delivery in a stall: past the destination's timeout.
const STALL: Duration = Duration::from_secs(5);

#[derive(Debug, Parser)]
#[command(
    name = "hookgate-chaos",
    about = "Chaos harness for hookgate: real processes, faults, and a total-queue checker"
)]
struct Cli {
    /// How long load and faults run (e.g. 60s, 10m).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Seed of every random choice (event mix, fault schedule); printed in the report.
    #[arg(long)]
    seed: Option<u64>,
    /// Also write the report here: JSON if the path ends in .json, else markdown.
    #[arg(long)]
    report: Option<PathBuf>,
    /// New events per second, over both stores (each resend and copy comes on top).
    #[arg(long, default_value_t = 150.0)]
    rate: f64,
    /// How long to wait for the queues to empty after the faults stop.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    drain_timeout: Duration,
    /// SIGKILL a random hookgate process every MIN..MAX.
    #[arg(long, default_value = "2s..5s", value_parser = parse_range)]
    kill_every: (Duration, Duration),
    /// Inject one other fault (postgres restart, pg_terminate_backend, sink 500/stall) every MIN..MAX.
    #[arg(long, default_value = "3s..7s", value_parser = parse_range)]
    fault_every: (Duration, Duration),
    /// Let kill -9 of a worker, PostgreSQL restarts and cut connections interrupt a
    /// reconciliation run (by default they wait for its end): the drain then waits for the
    /// lease it leaves, under a minute.
    #[arg(long)]
    interrupt_reconciliation: bool,
    /// Run the load without any fault (a baseline).
    #[arg(long)]
    no_faults: bool,
    /// The hookgate binary to test (default: build it with cargo, same profile as this one).
    #[arg(long)]
    hookgate_bin: Option<PathBuf>,
    /// RUST_LOG of the hookgate processes.
    #[arg(long, default_value = "info")]
    rust_log: String,
    /// Keep the run directory (configs, logs, databases) instead of removing it.
    #[arg(long)]
    keep: bool,
    /// Checker self-test: the sink answers 200 to every Nth delivery without recording it,
    /// so the run must FAIL with lost (or stored-never-delivered) events.
    #[arg(long, default_value_t = 0, hide = true)]
    sabotage_forget_every: u64,
    /// Checker self-test: the non-retrying provider's source gets no `[sources.reconcile]`,
    /// so the events its outage lost stay lost and the run must FAIL with never-delivered ones.
    #[arg(long, hide = true)]
    sabotage_no_reconcile: bool,
}

fn parse_range(s: &str) -> Result<(Duration, Duration), String> {
    let (a, b) = s.split_once("..").ok_or("expected MIN..MAX, e.g. 2s..5s")?;
    let a = humantime::parse_duration(a).map_err(|e| e.to_string())?;
    let b = humantime::parse_duration(b).map_err(|e| e.to_string())?;
    if b < a {
        return Err("MAX is below MIN".into());
    }
    Ok((a, b))
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // Ctrl-C at any point drops the run, whose Teardown kills the processes and the cluster.
    let result = tokio::select! {
        r = run(cli) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("hookgate-chaos: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Kills every hookgate process and stops the cluster when dropped: on success, on `?`
/// errors, and while unwinding from a panic.
struct Teardown {
    procs: Option<Arc<Procs>>,
    cluster: Option<Arc<Cluster>>,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        if let Some(p) = &self.procs {
            p.kill_all();
        }
        if let Some(c) = &self.cluster {
            c.stop();
        }
    }
}

/// The hookgate binary: given, or built by cargo next to this binary (same profile).
fn hookgate_bin(cli: &Cli) -> anyhow::Result<PathBuf> {
    if let Some(bin) = &cli.hookgate_bin {
        if !bin.is_file() {
            bail!("--hookgate-bin {} does not exist", bin.display());
        }
        // Absolute: the processes run from the run directory.
        return Ok(std::fs::canonicalize(bin)?);
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("binary without a directory")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(GATEWAY_DIR).join("Cargo.toml");
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--quiet")
        .arg("--manifest-path")
        .arg(&manifest);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    cmd.args(["--bin", "hookgate"]);
    eprintln!("chaos: building hookgate ({:?})", cmd);
    let status = cmd.status().context("run cargo build")?;
    if !status.success() {
        bail!("cargo build --bin hookgate failed ({status})");
    }
    let bin = dir.join("hookgate");
    if !bin.is_file() {
        bail!(
            "{} not found after cargo build; pass --hookgate-bin",
            bin.display()
        );
    }
    Ok(bin)
}

/// What is under test, for the report: `hookgate --version`, and the source revision from
/// `HOOKGATE_CHAOS_REV` or else `git describe --always --dirty` of this checkout.
fn hookgate_revision(bin: &Path) -> String {
    let run = |cmd: &mut Command| {
        cmd.output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    let version = run(Command::new(bin).arg("--version")).unwrap_or_else(|| "hookgate".into());
    let rev = std::env::var("HOOKGATE_CHAOS_REV").ok().or_else(|| {
        run(Command::new("git")
            .arg("-C")
            .arg(GATEWAY_DIR)
            .args(["describe", "--always", "--dirty"]))
    });
    match rev {
        Some(rev) => format!("{version} ({rev})"),
        None => version,
    }
}

async fn run(cli: Cli) -> anyhow::Result<bool> {
    let t_build = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let seed = cli.seed.unwrap_or_else(|| fastrand::u64(..));
    let mut command = format!(
        "hookgate-chaos --duration {} --seed {seed} --rate {}",
        humantime::format_duration(cli.duration),
        cli.rate
    );
    if cli.no_faults {
        command.push_str(" --no-faults");
    }
    if cli.interrupt_reconciliation {
        command.push_str(" --interrupt-reconciliation");
    }
    if cli.sabotage_forget_every > 0 {
        command.push_str(&format!(
            " --sabotage-forget-every {}",
            cli.sabotage_forget_every
        ));
    }
    if cli.sabotage_no_reconcile {
        command.push_str(" --sabotage-no-reconcile");
    }
    eprintln!("chaos: seed {seed} ({command})");
    let bin = hookgate_bin(&cli)?;
    let build_secs = t_build.elapsed().as_secs_f64();
    let revision = hookgate_revision(&bin);
    // Every time in the run (fault timeline, attempts, deliveries) counts from here.
    let t0 = Instant::now();
    let pg_bin = cluster::find_pg_bin()
        .context("no PostgreSQL binaries (initdb, pg_ctl) in PATH or /usr/lib/postgresql/*/bin")?;

    let workdir = Arc::new(WorkDir::create(cli.keep)?);
    let pg_dir = workdir.path("pg");
    workdir.spawn_watchdog(&cluster::stop_argv(&pg_bin, &pg_dir))?;
    let mut teardown = Teardown {
        procs: None,
        cluster: None,
    };

    // PostgreSQL.
    let cluster = Arc::new(Cluster::start(&pg_bin, &pg_dir, cluster::free_port()?).await?);
    teardown.cluster = Some(cluster.clone());
    let pg_url = cluster.url(DB_NAME);
    eprintln!(
        "chaos: PostgreSQL cluster at {pg_url} (data {})",
        cluster.data_dir().display()
    );

    // The broker: a NATS server of the run's own, so a fault can kill it.
    let broker = Arc::new(broker::Broker::start(workdir.path("nats")).await?);
    eprintln!("chaos: NATS JetStream at {}", broker.url());

    // The sink.
    let sink = Sink::start(DEST_SECRET, STALL, t0, cli.sabotage_forget_every).await?;
    // The non-retrying provider's events API, which reconciliation lists.
    let provider_api = ProviderApi::start(t0).await?;
    let reconciled = !cli.sabotage_no_reconcile;
    let once_source = OnceSource {
        api_base: reconciled.then_some(provider_api.base.as_str()),
        lookback: cli.duration + cli.drain_timeout + Duration::from_secs(7 * 60),
    };

    // Configurations: one per process slot (each ingest process keeps its port).
    let schedule = retry_schedule(cli.duration + cli.drain_timeout + Duration::from_secs(120));
    let lite_db = workdir.path("lite.db");
    let lite_url = format!("sqlite://{}", lite_db.display());
    let mut specs = Vec::new();
    for (name, kind) in [
        ("pg-api-1", Kind::Api),
        ("pg-api-2", Kind::Api),
        ("pg-worker-1", Kind::Worker),
        ("pg-worker-2", Kind::Worker),
        ("sqlite-all", Kind::AllInOne),
    ] {
        let port = match kind {
            Kind::Worker => None,
            _ => Some(cluster::free_port()?),
        };
        let (db_url, source, once, sink_path) = match kind {
            Kind::AllInOne => (lite_url.as_str(), LITE_SOURCE, None, "/sqlite"),
            _ => (pg_url.as_str(), PG_SOURCE, Some(&once_source), "/postgres"),
        };
        let config = workdir.path(&format!("{name}.toml"));
        std::fs::write(
            &config,
            render_config(&ConfigParams {
                listen_port: port.unwrap_or(0),
                db_url,
                source,
                once,
                sink_url: &format!("{}{sink_path}", sink.base),
                broker_url: &broker.url(),
                schedule: &schedule,
            }),
        )?;
        specs.push(SlotSpec {
            name: name.to_owned(),
            kind,
            config,
            log: workdir.path(&format!("{name}.log")),
            port,
        });
    }
    migrate(&bin, &specs[0].config)?;
    migrate(&bin, &specs[4].config)?;
    let pg_ports: Vec<(usize, u16)> = specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind == Kind::Api)
        .map(|(i, s)| (i, s.port.expect("api port")))
        .collect();
    let lite_port = (4, specs[4].port.expect("all-in-one port"));

    let procs = Arc::new(Procs::new(
        bin.clone(),
        cli.rust_log.clone(),
        specs,
        workdir.clone(),
        t0,
    ));
    teardown.procs = Some(procs.clone());
    for i in 0..procs.len() {
        let p = procs.clone();
        tokio::task::spawn_blocking(move || p.start(i)).await??;
    }
    let supervising = Arc::new(AtomicBool::new(true));
    let supervisor = {
        let (procs, supervising) = (procs.clone(), supervising.clone());
        tokio::spawn(async move {
            while supervising.load(Ordering::SeqCst) {
                procs.supervise_once();
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let setup_secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "chaos: {} processes up after {setup_secs:.1}s; load and faults for {}",
        procs.len(),
        humantime::format_duration(cli.duration)
    );

    // Load and faults.
    let t_load = Instant::now();
    let load = Load::new(
        LoadOpts {
            rate: cli.rate,
            pg_share: 2.0 / 3.0,
            once_share: 0.2,
            resend_later: 0.10,
            concurrent: 0.05,
            max_attempts: 12,
            max_in_flight: 4000,
            request_timeout: Duration::from_secs(10),
        },
        procs.clone(),
        pg_ports,
        lite_port,
        provider_api.state.clone(),
        t0,
    )?;
    let load_task = tokio::spawn(load.clone().run(seed));
    let mut ordered_keys = ordered::spawn_keys(&load, load::Target::Pg, seed ^ 0x6f72_6470);
    ordered_keys.extend(ordered::spawn_keys(
        &load,
        load::Target::Lite,
        seed ^ 0x6f72_646c,
    ));
    let faults = Faults::new(
        FaultOpts {
            kill_every: cli.kill_every,
            fault_every: cli.fault_every,
            restart_delay: (Duration::from_millis(500), Duration::from_secs(3)),
            sink_window: (Duration::from_secs(2), Duration::from_secs(8)),
            // Longer than the 5 s lease.
            pause: (Duration::from_secs(6), Duration::from_secs(9)),
            // Seconds of refused connections: the non-retrying provider's events sent
            // meanwhile are never acknowledged.
            outage: (Duration::from_secs(4), Duration::from_secs(7)),
            interrupt_reconciliation: cli.interrupt_reconciliation,
        },
        procs.clone(),
        cluster.clone(),
        sink.state.clone(),
        broker.clone(),
        t0,
    );
    let fault_tasks = if cli.no_faults {
        Vec::new()
    } else {
        vec![
            tokio::spawn(faults.clone().kill_loop(seed ^ 0x6b69_6c6c)),
            tokio::spawn(faults.clone().fault_loop(seed ^ 0x6661_756c)),
        ]
    };
    tokio::time::sleep(cli.duration).await;

    // Stop the faults and the new load; bring everything back.
    faults.stop();
    load.stop();
    for t in fault_tasks {
        let _ = t.await;
    }
    faults.stop();
    let _ = load_task.await;
    for k in ordered_keys {
        let _ = k.await;
    }
    let load_secs = t_load.elapsed().as_secs_f64();
    let t_settle = Instant::now();
    let load_stopped_at = t0.elapsed().as_secs_f64();
    eprintln!(
        "chaos: load and faults stopped after {load_secs:.1}s; {} copies still in flight",
        load.in_flight()
    );
    let mut warnings = Vec::new();
    {
        let c = cluster.clone();
        tokio::task::spawn_blocking(move || c.ensure_running()).await??;
    }
    cluster.wait_ready(Duration::from_secs(60)).await?;
    broker.ensure_running().await?;
    procs.release_holds();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !procs.all_up() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if !procs.all_up() {
        warnings.push("not every hookgate process could be restarted within 60 s".to_owned());
    }
    if !load.wait_idle(Duration::from_secs(90)).await {
        warnings.push(format!(
            "{} sender copies were still retrying 90 s after the load stopped",
            load.in_flight()
        ));
    }
    let settle_secs = t_settle.elapsed().as_secs_f64();

    // Drain.
    let t_drain = Instant::now();
    drain::drain(
        &drain::DrainSpec {
            pg_url: &pg_url,
            lite_db: &lite_db,
            timeout: cli.drain_timeout,
            provider_api: &provider_api.state,
            reconciled,
            load_stopped_at,
        },
        &mut warnings,
    )
    .await;
    let drain_secs = t_drain.elapsed().as_secs_f64();
    eprintln!("chaos: drained in {drain_secs:.1}s; checking");

    // Check.
    let postgres = check::DbState::read_pg(&pg_url).await?;
    let sqlite = check::DbState::read_sqlite(&lite_db).await?;
    supervising.store(false, Ordering::SeqCst);
    let _ = supervisor.await;
    let records = load.records.lock().unwrap().clone();
    // The ordered destination's deliveries are its own checker's; the others see one
    // destination per event, as before.
    let (ordered_deliveries, deliveries): (Vec<_>, Vec<_>) = sink
        .state
        .deliveries()
        .into_iter()
        .partition(|d| d.path.ends_with(ordered::PATH_SUFFIX));
    let ordered = ordered::check(&records, &ordered_deliveries, &postgres, &sqlite);
    let mut fault_log = faults.log.lock().unwrap().clone();
    fault_log.sort_by(|a, b| a.at_secs.total_cmp(&b.at_secs));
    let slots: Vec<(String, Kind)> = (procs.specs.iter())
        .map(|s| (s.name.clone(), s.kind))
        .collect();
    let duplicates = duplicates::attribute(
        &sink.state.deliveries(),
        &duplicates::Context {
            attempts: &duplicates::read_attempts(&pg_url, &lite_db).await?,
            faults: &fault_log,
            slots_by_pid: &procs.slots_by_pid(),
            slots: &slots,
            lease_secs: config::LEASE.as_secs_f64(),
            timeout_secs: config::DEST_TIMEOUT.as_secs_f64(),
        },
    );
    let findings = check::check(&records, &deliveries, &postgres, &sqlite);
    let once = recovery::check_once(
        &records,
        &deliveries,
        recovery::RecoveryState::read(&pg_url).await?,
        provider_api.state.counts(),
        reconciled,
    );
    let stored: Vec<&String> = postgres.ids.values().chain(sqlite.ids.values()).collect();
    let broker_findings = broker::check(&stored, &broker.messages().await?);
    let mut violations = findings.violations();
    violations.extend(once.violations());
    violations.extend(broker_findings.violations());
    violations.extend(ordered.violations());
    violations.extend(duplicates.violations());
    let unexpected_exits = procs.unexpected_exits();
    if !unexpected_exits.is_empty() {
        warnings.push(format!(
            "{} hookgate process(es) exited on their own (restarted by the harness): {}",
            unexpected_exits.len(),
            unexpected_exits
                .iter()
                .map(|e| format!("{} at +{:.1}s ({})", e.slot, e.at_secs, e.status))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let report = Report {
        verdict: if violations.is_empty() {
            "PASS"
        } else {
            "FAIL"
        },
        seed,
        started_at,
        hookgate_bin: bin.display().to_string(),
        hookgate_revision: revision,
        command,
        rate: cli.rate,
        build_secs,
        setup_secs,
        load_secs,
        settle_secs,
        drain_secs,
        total_secs: t0.elapsed().as_secs_f64(),
        findings,
        once,
        broker: broker_findings,
        ordered,
        duplicates,
        spared: (
            faults.spared.load(Ordering::Relaxed),
            faults.spare_gave_up.load(Ordering::Relaxed),
            cli.interrupt_reconciliation,
        ),
        requests_by_process: report::requests_by_process(&records),
        faults_total: fault_log.len() as u64,
        faults: faults.counts(),
        starts: procs.start_counts(),
        unexpected_exits,
        postgres,
        sqlite,
        violations,
        warnings,
        fault_log,
    };
    print!("{}", report.text());
    let logs: Vec<(String, PathBuf)> = (procs.specs.iter())
        .map(|s| (s.name.clone(), s.log.clone()))
        .collect();
    print!(
        "{}",
        evidence::for_unexplained(
            &report.duplicates.unexplained,
            &logs,
            config::LEASE.as_secs_f64()
        )
    );
    if let Some(path) = &cli.report {
        let body = if path.extension().is_some_and(|e| e == "json") {
            serde_json::to_string_pretty(&report)?
        } else {
            report.markdown()
        };
        std::fs::write(path, body).with_context(|| format!("write {}", path.display()))?;
        eprintln!("chaos: report written to {}", path.display());
    }
    if cli.keep {
        workdir.dump_history(&deliveries, &records);
    }
    let pass = report.violations.is_empty();
    drop(teardown);
    sink.stop().await;
    provider_api.stop().await;
    Ok(pass)
}
