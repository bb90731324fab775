//! The run's temp directory and its cleanup. Normal exits, errors and panics clean up through
//! `Drop` (children killed, cluster stopped, directory removed). A watchdog shell process
//! covers the rest (the harness itself killed with SIGKILL): once our pid is gone it kills the
//! hookgate processes listed in `pids` (only if their command line still names this directory,
//! so a reused pid is never hit), stops the cluster and removes the directory.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context as _;

use crate::cluster::sh_join;

pub struct WorkDir {
    pub root: PathBuf,
    keep: bool,
}

impl WorkDir {
    pub fn create(keep: bool) -> anyhow::Result<WorkDir> {
        let name = format!("hookgate-chaos-{}", uuid::Uuid::now_v7().simple());
        let root = std::env::temp_dir().join(name);
        std::fs::create_dir(&root).with_context(|| format!("create {}", root.display()))?;
        // The postgres user must be able to reach its data directory inside.
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755))?;
        Ok(WorkDir { root, keep })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// With `--keep`: what the sink received (`deliveries.jsonl`) and what the load generator
    /// sent and was answered (`sent.jsonl`).
    pub fn dump_history(
        &self,
        deliveries: &[crate::sink::Delivery],
        records: &std::collections::HashMap<String, crate::load::EventRecord>,
    ) {
        let lines: Vec<String> = deliveries
            .iter()
            .map(|d| {
                serde_json::json!({
                    "at": d.at_secs, "path": d.path, "webhook_id": d.webhook_id,
                    "provider_event_id": d.provider_event_id, "attempt": d.attempt,
                    "answered": format!("{:?}", d.answered), "signature_ok": d.signature_ok,
                })
                .to_string()
            })
            .collect();
        let _ = std::fs::write(self.path("deliveries.jsonl"), lines.join("\n"));
        let mut recs: Vec<(&String, &crate::load::EventRecord)> = records.iter().collect();
        recs.sort_by(|a, b| a.0.cmp(b.0));
        let lines: Vec<String> = recs
            .iter()
            .map(|(id, r)| {
                serde_json::json!({
                    "id": id, "target": r.target, "copies": r.copies,
                    "attempts": r.attempts, "gave_up": r.gave_up,
                })
                .to_string()
            })
            .collect();
        let _ = std::fs::write(self.path("sent.jsonl"), lines.join("\n"));
    }

    /// Arms the watchdog; `pg_stop` is the argv that stops the cluster.
    pub fn spawn_watchdog(&self, pg_stop: &[String]) -> anyhow::Result<()> {
        let root = sh_join(&[self.root.display().to_string()]);
        let pids = sh_join(&[self.root.join("pids").display().to_string()]);
        let script = format!(
            "while kill -0 {me} 2>/dev/null; do sleep 1; done; \
             if [ -f {pids} ]; then for p in $(cat {pids}); do \
               if tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -qF {root}; then kill -9 $p; fi; \
             done; fi; \
             {stop} >/dev/null 2>&1; {rm}",
            me = std::process::id(),
            stop = sh_join(pg_stop),
            rm = if self.keep {
                ":".to_owned()
            } else {
                format!("rm -rf {root}")
            },
        );
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a Ctrl-C aimed at the harness must not kill the cleaner.
            .process_group(0)
            .spawn()
            .context("spawn cleanup watchdog")?;
        Ok(())
    }

    /// Rewrites the list of live child pids the watchdog would kill.
    pub fn write_pids(&self, pids: &[u32]) {
        let text: String = pids.iter().map(|p| format!("{p}\n")).collect();
        let tmp = self.root.join("pids.tmp");
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, self.root.join("pids"));
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("chaos: kept the run directory {}", self.root.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}
