//! PostgreSQL harness for integration tests.
//!
//! Tests use `DATABASE_URL` (default: local superuser on 127.0.0.1:5432). When nothing
//! answers there but PostgreSQL is installed, a throwaway cluster is started once per
//! test process and shared by all its tests. Each test gets its own database through
//! [`TestDatabase`], so tests never see each other's rows.

use std::ffi::OsStr;
use std::fmt::Debug;
use std::future::Future;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::{Connection, PgConnection};

// The chaos run's cluster code: the same initdb / pg_ctl / run-as-postgres helpers.
use hookgate_pgcluster::{as_postgres, find_pg_bin, is_root, sh_join};

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Admin URL (database `postgres`) of a server that answers, starting a throwaway
/// cluster if needed. The first call may block its thread for a few seconds.
pub async fn admin_url() -> String {
    static ADMIN: OnceLock<Result<String, String>> = OnceLock::new();
    // Each #[tokio::test] owns a runtime that dies with the test, so the shared setup runs
    // on a private thread and runtime instead of whichever test happened to come first.
    // The outcome (even a failure) is cached so every test reports it without retrying.
    let result = ADMIN.get_or_init(|| {
        std::thread::spawn(|| block_on(resolve_admin_url()))
            .join()
            .unwrap_or_else(|_| Err("PostgreSQL test harness setup panicked".to_owned()))
    });
    match result {
        Ok(url) => url.clone(),
        Err(msg) => panic!("{msg}"),
    }
}

/// A fresh, empty database named `hookgate_test_<uuid simple>`; dropped
/// (`DROP DATABASE ... WITH (FORCE)`) when the value is dropped.
pub struct TestDatabase {
    admin_url: String,
    url: String,
    name: String,
}

impl TestDatabase {
    pub async fn create() -> TestDatabase {
        let admin_url = admin_url().await;
        let name = format!("hookgate_test_{}", uuid::Uuid::now_v7().simple());
        let mut conn = PgConnection::connect(&admin_url)
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", admin_url));
        // The name is hex from a UUID, so quoting it is enough to make it a safe identifier.
        sqlx::raw_sql(&format!(r#"CREATE DATABASE "{name}""#))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("create database {name}: {e}"));
        let _ = conn.close().await;
        // Going through `url` keeps credentials and query parameters (sslmode, host=...).
        let mut url = url::Url::parse(&admin_url).expect("admin URL is a valid URL");
        url.set_path(&name);
        TestDatabase {
            admin_url,
            url: url.into(),
            name,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (admin, name) = (self.admin_url.clone(), self.name.clone());
        // Drop can run inside a runtime (where block_on panics) or while unwinding after the
        // test's runtime is gone; a private thread with its own runtime works in both cases.
        let joined = std::thread::spawn(move || {
            block_on(async move {
                let mut conn = PgConnection::connect(&admin).await?;
                // FORCE: a pool the test leaked must not keep the database alive.
                let sql = format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#);
                sqlx::raw_sql(&sql).execute(&mut conn).await?;
                conn.close().await
            })
        })
        .join();
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: could not drop test database {}: {e}", self.name),
            Err(_) => eprintln!("warning: dropping test database {} panicked", self.name),
        }
    }
}

fn block_on<F: Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build tokio runtime")
        .block_on(fut)
}

async fn resolve_admin_url() -> Result<String, String> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let why = match try_connect(&url).await {
        Ok(()) => return Ok(url),
        Err(e) => format!("no PostgreSQL server answered at {url} ({e})"),
    };
    let Some(bin) = find_pg_bin() else {
        return Err(format!(
            "{why}, and no PostgreSQL binaries (initdb, pg_ctl) were found in PATH or \
             /usr/lib/postgresql/*/bin to start a throwaway one. Install PostgreSQL \
             (e.g. `apt-get install postgresql`) or set DATABASE_URL to a reachable server."
        ));
    };
    let bin_dir = bin.display();
    let cluster = start_cluster(&bin)
        .map_err(|e| format!("{why}; starting a throwaway cluster from {bin_dir}: {e}"))?;
    // Say so, so a mistyped DATABASE_URL is not silently replaced without a trace.
    eprintln!("note: {why}; using a throwaway cluster at {cluster}");
    // pg_ctl -w already waited for startup; this confirms it through the client tests use.
    let mut last = String::new();
    for _ in 0..25 {
        match try_connect(&cluster).await {
            Ok(()) => return Ok(cluster),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!(
        "{why}; the throwaway cluster at {cluster} never answered: {last}"
    ))
}

async fn try_connect(url: &str) -> Result<(), String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect(url)).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("timed out after {CONNECT_TIMEOUT:?}")),
    }
}

/// Starts a cluster in a fresh temp dir and returns its admin URL. The watchdog removes it
/// when this process exits, because statics (and so any guard we could keep) never drop.
fn start_cluster(bin: &Path) -> Result<String, String> {
    let root = format!("hookgate-pg-{}", uuid::Uuid::now_v7().simple());
    let root = std::env::temp_dir().join(root);
    let data = root.join("data");
    let log = root.join("postgres.log");
    std::fs::create_dir(&root).map_err(|e| format!("create {}: {e}", root.display()))?;
    // initdb and postgres refuse to run as root, which is how CI runs tests.
    let as_root = is_root();
    // Armed before anything else can fail, so a half-started cluster is cleaned up too.
    spawn_watchdog(bin, &root, &data, as_root)?;
    if as_root {
        let root_arg = root.display().to_string();
        run(&["chown", "-R", "postgres:", &root_arg], &root)?;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("pick a free port: {e}"))?
        .port();
    let data_arg = data.display().to_string();
    let initdb = "-U postgres -A trust -E UTF8 --locale=C --no-sync -D".split(' ');
    let initdb: Vec<&str> = initdb.chain([data_arg.as_str()]).collect();
    run(&as_postgres(as_root, &bin.join("initdb"), &initdb), &root)?;
    // Appending keeps the file's owner, and avoids pg_ctl -o, which goes through a shell.
    let conf = format!(
        "\nlisten_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\n\
         fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n",
        root.display()
    );
    std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("postgresql.conf"))
        .and_then(|mut f| f.write_all(conf.as_bytes()))
        .map_err(|e| format!("configure cluster: {e}"))?;
    let log_arg = log.display().to_string();
    let start = ["-D", &data_arg, "-l", &log_arg, "-w", "-t", "60", "start"];
    run(&as_postgres(as_root, &bin.join("pg_ctl"), &start), &root).map_err(|e| {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        format!("{e}\nserver log:\n{log}")
    })?;
    Ok(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
}

fn spawn_watchdog(bin: &Path, root: &Path, data: &Path, as_root: bool) -> Result<(), String> {
    let data_arg = data.display().to_string();
    let stop = as_postgres(
        as_root,
        &bin.join("pg_ctl"),
        &["-D", &data_arg, "-m", "immediate", "stop"],
    );
    let script = format!(
        "while kill -0 {} 2>/dev/null; do sleep 1; done; {} >/dev/null 2>&1; rm -rf {}",
        std::process::id(),
        sh_join(&stop),
        sh_join(&[root.display().to_string()]),
    );
    // Never waited on: it must outlive us, and is reparented to init when we exit.
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Own process group, so a Ctrl-C aimed at `cargo test` does not kill the cleaner.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("spawn cleanup watchdog: {e}"))?;
    Ok(())
}

/// Runs to completion from `dir` (the postgres user may not be able to read our cwd).
fn run<S: AsRef<OsStr> + Debug>(argv: &[S], dir: &Path) -> Result<(), String> {
    hookgate_pgcluster::run(argv, dir).map_err(|e| format!("{e:#}"))
}
