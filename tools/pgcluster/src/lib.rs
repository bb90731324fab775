//! hookgate-pgcluster: a throwaway PostgreSQL cluster owned by one run (the chaos run, the
//! benchmark suite): initdb into the run's temp dir (as the `postgres` OS user when we
//! are root, since initdb and postgres refuse root), its own port, trust auth, fsync ON
//! (durability is what both measure). Restarting it and terminating its backends is safe
//! because nobody else uses it. The integration tests' kit (tools/testkit/src/postgres.rs)
//! uses its helpers (finding the binaries, running them as `postgres`).

use std::ffi::OsStr;
use std::fmt::Debug;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context as _};
use sqlx::{Connection as _, PgConnection};

/// The database hookgate uses inside the cluster.
pub const DB_NAME: &str = "hookgate";

pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
    as_root: bool,
    stopped: AtomicBool,
}

impl Cluster {
    /// initdb + start + `CREATE DATABASE hookgate`. `dir` must not exist yet; its parent
    /// must be traversable by the postgres user.
    pub async fn start(bin: &Path, dir: &Path, port: u16) -> anyhow::Result<Cluster> {
        Self::start_with(bin, dir, port, &[]).await
    }

    /// As `start`, with `settings` (name, value) appended to postgresql.conf. They cannot
    /// weaken durability: fsync, synchronous_commit and full_page_writes are set after them.
    pub async fn start_with(
        bin: &Path,
        dir: &Path,
        port: u16,
        settings: &[(&str, String)],
    ) -> anyhow::Result<Cluster> {
        let as_root = is_root();
        own_dir(dir, as_root)?;
        let data = dir.join("data");
        let log = dir.join("postgres.log");
        let cluster = Cluster {
            bin: bin.to_path_buf(),
            dir: dir.to_path_buf(),
            data,
            log,
            port,
            as_root,
            // Nothing to stop until pg_ctl start has run.
            stopped: AtomicBool::new(true),
        };
        let data_arg = cluster.data.display().to_string();
        // No --no-sync: the data directory is flushed like a real one.
        let initdb = [
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "-D",
            &data_arg,
        ];
        run(&cluster.pg("initdb", &initdb), dir)?;
        // fsync and synchronous_commit stay at their (durable) defaults; said explicitly so
        // a changed default or an included file cannot silently weaken the run.
        let mut conf = String::from("\n# throwaway cluster\nmax_connections = 200\n");
        for (name, value) in settings {
            conf.push_str(&format!("{name} = {value}\n"));
        }
        conf.push_str(&format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\n\
             unix_socket_directories = '{}'\nfsync = on\nsynchronous_commit = on\n\
             full_page_writes = on\nlog_min_messages = warning\n",
            dir.display()
        ));
        cluster.configure_and_start(&conf).await?;
        let mut conn = PgConnection::connect(&cluster.url("postgres")).await?;
        sqlx::raw_sql(&format!(r#"CREATE DATABASE "{DB_NAME}""#))
            .execute(&mut conn)
            .await?;
        let _ = conn.close().await;
        Ok(cluster)
    }

    /// A streaming replica of `primary` (hot standby, read-only): `pg_basebackup -R` of the
    /// running primary into `dir`, then started on `port`. `dir` must not exist yet.
    pub async fn start_replica(
        primary: &Cluster,
        dir: &Path,
        port: u16,
    ) -> anyhow::Result<Cluster> {
        let as_root = primary.as_root;
        own_dir(dir, as_root)?;
        let replica = Cluster {
            bin: primary.bin.clone(),
            dir: dir.to_path_buf(),
            data: dir.join("data"),
            log: dir.join("postgres.log"),
            port,
            as_root,
            stopped: AtomicBool::new(true),
        };
        let data_arg = replica.data.display().to_string();
        let primary_port = primary.port.to_string();
        let basebackup = [
            "-h",
            "127.0.0.1",
            "-p",
            &primary_port,
            "-U",
            "postgres",
            "-D",
            &data_arg,
            "-R",
            "-X",
            "stream",
            // An immediate checkpoint: a spread one takes minutes on an idle server.
            "-c",
            "fast",
        ];
        run(&replica.pg("pg_basebackup", &basebackup), dir)?;
        // The copy carries the primary's port and socket directory; later lines win.
        let conf = format!(
            "\n# streaming replica\nport = {port}\nunix_socket_directories = '{}'\nhot_standby = on\n",
            dir.display()
        );
        replica.configure_and_start(&conf).await?;
        Ok(replica)
    }

    /// Appends `conf` to postgresql.conf, starts the server and waits for it.
    async fn configure_and_start(&self, conf: &str) -> anyhow::Result<()> {
        std::fs::OpenOptions::new()
            .append(true)
            .open(self.data.join("postgresql.conf"))
            .and_then(|mut f| f.write_all(conf.as_bytes()))
            .context("configure cluster")?;
        self.stopped.store(false, Ordering::SeqCst);
        self.ctl(&["start"])?;
        self.wait_ready(Duration::from_secs(30)).await
    }

    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// `pg_ctl restart -m <mode>` (blocking; waits for the server to accept connections).
    pub fn restart(&self, immediate: bool) -> anyhow::Result<()> {
        let mode = if immediate { "immediate" } else { "fast" };
        self.ctl(&["-m", mode, "restart"])
    }

    pub fn is_running(&self) -> bool {
        let data_arg = self.data.display().to_string();
        let argv = self.pg("pg_ctl", &["-D", &data_arg, "status"]);
        Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts the server if it is not running (after a failed restart).
    pub fn ensure_running(&self) -> anyhow::Result<()> {
        if self.is_running() {
            return Ok(());
        }
        self.ctl(&["start"])
    }

    /// Waits until a connection to the admin database succeeds.
    pub async fn wait_ready(&self, limit: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        let url = self.url("postgres");
        loop {
            let attempt =
                tokio::time::timeout(Duration::from_secs(2), PgConnection::connect(&url)).await;
            match attempt {
                Ok(Ok(conn)) => {
                    let _ = conn.close().await;
                    return Ok(());
                }
                Ok(Err(e)) if tokio::time::Instant::now() > deadline => {
                    bail!("PostgreSQL at {url} not ready after {limit:?}: {e}")
                }
                Err(_) if tokio::time::Instant::now() > deadline => {
                    bail!("PostgreSQL at {url} not ready after {limit:?}: connect timed out")
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// Cuts every connection to hookgate's database; returns how many were terminated.
    pub async fn terminate_backends(&self) -> anyhow::Result<u64> {
        let connect = PgConnection::connect(&self.url("postgres"));
        let mut conn = tokio::time::timeout(Duration::from_secs(5), connect)
            .await
            .context("connect timed out")??;
        let sql = "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                   WHERE datname = $1 AND pid <> pg_backend_pid()) AS t";
        let n: i64 = sqlx::query_scalar(sql)
            .bind(DB_NAME)
            .fetch_one(&mut conn)
            .await?;
        let _ = conn.close().await;
        Ok(n as u64)
    }

    /// `pg_ctl stop -m immediate`: the run is over, nothing in it needs keeping.
    pub fn stop(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = self.ctl(&["-m", "immediate", "stop"]);
    }

    fn ctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let data_arg = self.data.display().to_string();
        let log_arg = self.log.display().to_string();
        // -l on every start and restart: without it the server would inherit our pipes and
        // `output()` would wait for it forever.
        let mut argv = vec!["-D", &data_arg, "-l", &log_arg, "-w", "-t", "60"];
        argv.extend_from_slice(args);
        run(&self.pg("pg_ctl", &argv), &self.dir).map_err(|e| {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            anyhow::anyhow!("{e}\nserver log ends:\n{}", tail.join("\n"))
        })
    }

    /// argv of a PostgreSQL program, run as the postgres user when we are root.
    pub fn pg(&self, program: &str, args: &[&str]) -> Vec<String> {
        as_postgres(self.as_root, &self.bin.join(program), args)
    }
}

/// Creates a cluster's directory, owned by the postgres user when we are root.
fn own_dir(dir: &Path, as_root: bool) -> anyhow::Result<()> {
    std::fs::create_dir(dir).with_context(|| format!("create {}", dir.display()))?;
    if as_root {
        run(
            &["chown", "-R", "postgres:", &dir.display().to_string()],
            dir,
        )?;
    }
    Ok(())
}

/// A port free now on 127.0.0.1 (another process could take it before we bind it; the
/// cluster's start would then fail loudly).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// argv that stops a cluster in `dir` (for the watchdog, armed before the cluster exists).
pub fn stop_argv(bin: &Path, dir: &Path) -> Vec<String> {
    let data = dir.join("data").display().to_string();
    as_postgres(
        is_root(),
        &bin.join("pg_ctl"),
        &["-D", &data, "-m", "immediate", "stop"],
    )
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Directory holding initdb, pg_ctl and postgres of the newest installed PostgreSQL.
pub fn find_pg_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        dirs.extend(entries.flatten().map(|e| e.path().join("bin")));
    }
    dirs.into_iter()
        .filter_map(|d| std::fs::canonicalize(d.join("initdb")).ok())
        .filter_map(|initdb| Some(initdb.parent()?.to_path_buf()))
        .filter(|dir| dir.join("pg_ctl").is_file())
        .filter_map(|dir| Some((pg_version(&dir)?, dir)))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, dir)| dir)
}

fn pg_version(dir: &Path) -> Option<Vec<u32>> {
    let out = Command::new(dir.join("initdb"))
        .arg("--version")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().nth(2)?;
    let parts: Vec<u32> = version.split('.').map_while(|p| p.parse().ok()).collect();
    (!parts.is_empty()).then_some(parts)
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

pub fn as_postgres(as_root: bool, program: &Path, args: &[&str]) -> Vec<String> {
    let mut argv = vec![program.display().to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    if !as_root {
        return argv;
    }
    let runuser = ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"]
        .into_iter()
        .find(|p| Path::new(p).is_file());
    match runuser {
        Some(runuser) => [runuser, "-u", "postgres", "--"]
            .into_iter()
            .map(String::from)
            .chain(argv)
            .collect(),
        None => ["su", "postgres", "-s", "/bin/sh", "-c", &sh_join(&argv)]
            .into_iter()
            .map(String::from)
            .collect(),
    }
}

/// Runs to completion from `dir` (the postgres user may not be able to read our cwd).
pub fn run<S: AsRef<OsStr> + Debug>(argv: &[S], dir: &Path) -> anyhow::Result<()> {
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("run {argv:?}"))?;
    if out.status.success() {
        return Ok(());
    }
    bail!(
        "{argv:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn sh_join(argv: &[String]) -> String {
    let quoted: Vec<String> = argv
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    quoted.join(" ")
}
