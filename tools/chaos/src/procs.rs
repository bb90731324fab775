//! The hookgate processes under test, one slot each: spawned from the built binary, killed
//! with SIGKILL (`Child::kill`), restarted by a supervisor loop on the same config (and, for
//! ingest processes, the same port, so the load generator's address list stays valid).

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde::Serialize;

use crate::workdir::WorkDir;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `--role api` on PostgreSQL.
    Api,
    /// `--role worker` on PostgreSQL.
    Worker,
    /// `--role all` on SQLite.
    AllInOne,
}

impl Kind {
    pub fn role(self) -> &'static str {
        match self {
            Kind::Api => "api",
            Kind::Worker => "worker",
            Kind::AllInOne => "all",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Api => "api (pg)",
            Kind::Worker => "worker (pg)",
            Kind::AllInOne => "all-in-one (sqlite)",
        }
    }
}

pub struct SlotSpec {
    pub name: String,
    pub kind: Kind,
    pub config: PathBuf,
    pub log: PathBuf,
    /// Fixed ingest port (api and all-in-one); workers listen on a port of their own choosing.
    pub port: Option<u16>,
}

#[derive(Default)]
struct SlotState {
    child: Option<Child>,
    starting: bool,
    /// The supervisor leaves the slot down until then (a kill's restart delay).
    hold_until: Option<Instant>,
    starts: u32,
    failed_starts: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct UnexpectedExit {
    pub slot: String,
    pub at_secs: f64,
    pub status: String,
    pub log_tail: String,
}

pub struct Procs {
    bin: PathBuf,
    rust_log: String,
    pub specs: Vec<SlotSpec>,
    states: Vec<Mutex<SlotState>>,
    workdir: Arc<WorkDir>,
    started_at: Instant,
    unexpected: Mutex<Vec<UnexpectedExit>>,
    stopping: AtomicBool,
    /// Every process started: (pid, slot), to name the process behind a worker id.
    started: Mutex<Vec<(u32, usize)>>,
}

impl Procs {
    pub fn new(
        bin: PathBuf,
        rust_log: String,
        specs: Vec<SlotSpec>,
        workdir: Arc<WorkDir>,
        started_at: Instant,
    ) -> Self {
        let states = specs.iter().map(|_| Mutex::default()).collect();
        Self {
            bin,
            rust_log,
            specs,
            states,
            workdir,
            started_at,
            unexpected: Mutex::default(),
            stopping: AtomicBool::new(false),
            started: Mutex::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.specs.len()
    }

    /// Starts slot `i` and waits (blocking, up to 30 s) for its "listening" line. Fails if the
    /// process exits first (e.g. its database is down: `serve` migrates before it listens).
    pub fn start(&self, i: usize) -> anyhow::Result<()> {
        {
            let mut st = self.states[i].lock().unwrap();
            if st.child.is_some() || st.starting {
                return Ok(());
            }
            st.starting = true;
        }
        let result = self.spawn_and_wait(i);
        let mut st = self.states[i].lock().unwrap();
        st.starting = false;
        match result {
            Ok(mut child) if self.stopping.load(Ordering::SeqCst) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the run is stopping")
            }
            // Held down (a gateway outage began while it started): it must not come up yet.
            Ok(mut child) if st.hold_until.is_some_and(|t| Instant::now() < t) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{} is held down", self.specs[i].name)
            }
            Ok(child) => {
                st.starts += 1;
                self.started.lock().unwrap().push((child.id(), i));
                st.child = Some(child);
                drop(st);
                self.write_pids();
                Ok(())
            }
            Err(e) => {
                st.failed_starts += 1;
                Err(e)
            }
        }
    }

    fn spawn_and_wait(&self, i: usize) -> anyhow::Result<Child> {
        let spec = &self.specs[i];
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .with_context(|| format!("open {}", spec.log.display()))?;
        let _ = writeln!(
            log,
            "=== hookgate-chaos: starting {} at +{:.3}s ===",
            spec.name,
            self.started_at.elapsed().as_secs_f64()
        );
        let mut child = Command::new(&self.bin)
            .arg("serve")
            .arg("--config")
            .arg(&spec.config)
            .arg("--role")
            .arg(spec.kind.role())
            .env("RUST_LOG", &self.rust_log)
            .env("NO_COLOR", "1")
            .current_dir(self.workdir.root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", self.bin.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Keeps draining stdout so the process never blocks on a full pipe.
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) if line.starts_with("hookgate listening on ") => {
                    if let Some(port) = spec.port {
                        if !line.contains(&format!(":{port} ")) {
                            let _ = child.kill();
                            let _ = child.wait();
                            bail!("{} listens elsewhere than port {port}: {line}", spec.name);
                        }
                    }
                    return Ok(child);
                }
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Ok(Some(status)) = child.try_wait() {
                        bail!(
                            "{} exited during start-up ({status}); its log ends:\n{}",
                            spec.name,
                            self.log_tail(i, 5)
                        );
                    }
                    if Instant::now() > deadline {
                        let _ = child.kill();
                        let _ = child.wait();
                        bail!("{} did not start within 30 s", spec.name);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = child.wait()?;
                    bail!(
                        "{} exited during start-up ({status}); its log ends:\n{}",
                        spec.name,
                        self.log_tail(i, 5)
                    );
                }
            }
        }
    }

    /// SIGKILL (`kill -9`) and reap; the supervisor restarts the slot after `hold`.
    /// Returns false if the slot was not running.
    pub fn kill9(&self, i: usize, hold: Duration) -> bool {
        let child = {
            let mut st = self.states[i].lock().unwrap();
            let child = st.child.take();
            if child.is_some() {
                st.hold_until = Some(Instant::now() + hold);
            }
            child
        };
        let Some(mut child) = child else { return false };
        let _ = child.kill();
        let _ = child.wait();
        self.write_pids();
        true
    }

    /// SIGKILLs slot `i` if it runs and keeps it down for `hold` (or longer, if it was held
    /// longer already): a gateway outage. Returns whether it was running.
    pub fn hold_down(&self, i: usize, hold: Duration) -> bool {
        let child = {
            let mut st = self.states[i].lock().unwrap();
            let until = Instant::now() + hold;
            st.hold_until = Some(st.hold_until.map_or(until, |t| t.max(until)));
            st.child.take()
        };
        let Some(mut child) = child else { return false };
        let _ = child.kill();
        let _ = child.wait();
        self.write_pids();
        true
    }

    /// Sends `kill -<sig>` to slot `i`'s process; returns its pid if it was running.
    pub fn signal(&self, i: usize, sig: &str) -> Option<u32> {
        let st = self.states[i].lock().unwrap();
        let pid = st.child.as_ref()?.id();
        // Under the lock, so the pid cannot be reaped (and reused) meanwhile.
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(pid)
    }

    /// `kill -CONT` slot `i`, only if it still runs the process `pid` (it may have been
    /// killed and restarted while it was stopped).
    pub fn resume(&self, i: usize, pid: u32) {
        let st = self.states[i].lock().unwrap();
        if st.child.as_ref().map(Child::id) == Some(pid) {
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(pid.to_string())
                .status();
        }
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.states[i].lock().unwrap().child.is_some()
    }

    pub fn all_up(&self) -> bool {
        (0..self.len()).all(|i| self.is_up(i))
    }

    pub fn up_slots(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.is_up(i)).collect()
    }

    /// Reaps processes that died on their own (recorded as unexpected exits).
    fn reap(&self) {
        for i in 0..self.len() {
            let mut st = self.states[i].lock().unwrap();
            let Some(child) = st.child.as_mut() else {
                continue;
            };
            if let Ok(Some(status)) = child.try_wait() {
                st.child = None;
                drop(st);
                let exit = UnexpectedExit {
                    slot: self.specs[i].name.clone(),
                    at_secs: self.started_at.elapsed().as_secs_f64(),
                    status: status.to_string(),
                    log_tail: self.log_tail(i, 8),
                };
                eprintln!(
                    "chaos: {} exited on its own ({}) at +{:.1}s",
                    exit.slot, exit.status, exit.at_secs
                );
                self.unexpected.lock().unwrap().push(exit);
                self.write_pids();
            }
        }
    }

    /// One supervisor pass: reap, then start (in the background) every slot that is down and
    /// no longer held down. A failed start is retried on a later pass.
    pub fn supervise_once(self: &Arc<Self>) {
        self.reap();
        if self.stopping.load(Ordering::SeqCst) {
            return;
        }
        for i in 0..self.len() {
            {
                let mut st = self.states[i].lock().unwrap();
                if st.child.is_some() || st.starting {
                    continue;
                }
                match st.hold_until {
                    Some(t) if Instant::now() < t => continue,
                    _ => st.hold_until = None,
                }
            }
            let me = self.clone();
            tokio::task::spawn_blocking(move || {
                if let Err(e) = me.start(i) {
                    let first = e.to_string();
                    let first = first.lines().next().unwrap_or_default().to_owned();
                    eprintln!(
                        "chaos: restart of {} failed (retrying): {first}",
                        me.specs[i].name
                    );
                    // Back off a little before the next pass retries (a longer hold, an
                    // outage's, stays).
                    let mut st = me.states[i].lock().unwrap();
                    let until = Instant::now() + Duration::from_millis(700);
                    st.hold_until = Some(st.hold_until.map_or(until, |t| t.max(until)));
                }
            });
        }
    }

    /// Clears every hold so the supervisor restarts everything at once.
    pub fn release_holds(&self) {
        for st in &self.states {
            st.lock().unwrap().hold_until = None;
        }
    }

    pub fn unexpected_exits(&self) -> Vec<UnexpectedExit> {
        self.unexpected.lock().unwrap().clone()
    }

    /// The slot name of every process started so far, by pid.
    pub fn slots_by_pid(&self) -> std::collections::HashMap<u32, String> {
        let started = self.started.lock().unwrap();
        (started.iter())
            .map(|&(pid, i)| (pid, self.specs[i].name.clone()))
            .collect()
    }

    pub fn start_counts(&self) -> Vec<(String, u32, u32)> {
        self.specs
            .iter()
            .zip(&self.states)
            .map(|(s, st)| {
                let st = st.lock().unwrap();
                (s.name.clone(), st.starts, st.failed_starts)
            })
            .collect()
    }

    /// Kills everything for good (end of run, or any error/panic path through Drop).
    pub fn kill_all(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for st in &self.states {
            let child = st.lock().unwrap().child.take();
            if let Some(mut child) = child {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        self.write_pids();
    }

    fn write_pids(&self) {
        let pids: Vec<u32> = self
            .states
            .iter()
            .filter_map(|st| st.lock().unwrap().child.as_ref().map(Child::id))
            .collect();
        self.workdir.write_pids(&pids);
    }

    pub fn log_tail(&self, i: usize, n: usize) -> String {
        let text = std::fs::read_to_string(&self.specs[i].log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.kill_all();
    }
}
