//! The `hookgate` binary: `check` names bad keys, `migrate` migrates, and `serve` starts on
//! the README's example config and accepts the README's signed curl example.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

mod brokers;
mod listen;
mod output;
mod providers;
mod send;

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hookgate"));
    // The developer's own overrides must not leak into these tests.
    for (k, _) in std::env::vars() {
        if k.starts_with("HOOKGATE") {
            cmd.env_remove(k);
        }
    }
    cmd
}

fn repo_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

fn check(config: &str, env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookgate.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = bin();
    cmd.arg("check").arg("--config").arg(&path);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

const VALID: &str = r#"
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["whsec_a"]
destinations = ["billing"]

[[destinations]]
name = "billing"
url = "http://127.0.0.1:9000/x"
signing_secret = "whsec_c2VjcmV0LXNpZ25pbmcta2V5"
"#;

fn assert_rejected_naming(config: &str, env: &[(&str, &str)], key: &str) {
    let out = check(config, env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted a bad config:\n{config}");
    assert!(
        stderr.contains(key),
        "the error should name `{key}`, got: {stderr}"
    );
}

#[test]
fn check_accepts_the_example_and_a_minimal_config() {
    let out = bin()
        .arg("check")
        .arg("--config")
        .arg(repo_file("hookgate.example.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(check(VALID, &[]).status.success());
}

#[test]
fn check_rejects_bad_configs_naming_the_key() {
    assert_rejected_naming(&format!("[server]\nlisen = \"x\"\n{VALID}"), &[], "lisen");
    assert_rejected_naming(
        &VALID.replace(r#"provider = "stripe""#, r#"provider = "strype""#),
        &[],
        "sources[0].provider",
    );
    assert_rejected_naming(
        &VALID.replace(r#"secrets = ["whsec_a"]"#, "secrets = []"),
        &[],
        "sources[0].secrets",
    );
    assert_rejected_naming(
        &VALID.replace(
            r#"destinations = ["billing"]"#,
            r#"destinations = ["bill"]"#,
        ),
        &[],
        "sources[0].destinations[0]",
    );
    let route = |table: &str| {
        VALID.replace(
            r#"destinations = ["billing"]"#,
            &format!("[[sources.routes]]\ndestination = \"billing\"\n{table}\n"),
        )
    };
    assert!(check(&route(r#"match = { amount = { "$gte" = 5 } }"#), &[])
        .status
        .success());
    assert_rejected_naming(
        &route(r#"match = { data = { amount = { "$gte" = [5] } } }"#),
        &[],
        "`sources[0].routes[0].match.data.amount` $gte takes a number or a string",
    );
    assert_rejected_naming(
        &route(r#"event_types = ["invoice.*", ""]"#),
        &[],
        "sources[0].routes[0].event_types[1]",
    );
    assert_rejected_naming(
        &route(r#"match_headers = { x-a = { "$regex" = "a" } }"#),
        &[],
        "sources[0].routes[0].match_headers.x-a",
    );
    let rated = |rate: &str| {
        VALID.replace(
            "whsec_c2VjcmV0LXNpZ25pbmcta2V5\"",
            &format!("whsec_c2VjcmV0LXNpZ25pbmcta2V5\"\nrate_limit = \"{rate}\""),
        )
    };
    assert!(check(&rated("3000/min"), &[]).status.success());
    for bad in ["50", "50/day", "fast/s", "0/s", "-1/s"] {
        assert_rejected_naming(&rated(bad), &[], "`destinations[0].rate_limit`");
    }
    assert_rejected_naming(
        &format!("{VALID}[alerts]\ndestination = \"ops\"\n"),
        &[],
        "`alerts.destination` names unknown destination \"ops\"",
    );
    assert!(check(
        &format!("{VALID}[alerts]\ndestination = \"billing\"\n"),
        &[]
    )
    .status
    .success());
    assert_rejected_naming(
        &VALID.replace(r#"name = "stripe""#, r#"name = "hookgate-alerts""#),
        &[],
        "may not name a source \"hookgate-alerts\"",
    );
    let circuit = |table: &str| format!("{VALID}[destinations.circuit]\n{table}\n");
    assert!(check(&circuit("failures = 20\ncool_down = \"1m\""), &[])
        .status
        .success());
    assert_rejected_naming(
        &circuit("failures = 0"),
        &[],
        "`destinations[0].circuit.failures` must be positive",
    );
    assert_rejected_naming(
        &circuit("failures = 5\ncool_down = \"500ms\""),
        &[],
        "`destinations[0].circuit.cool_down` must be at least 1s",
    );
    assert_rejected_naming(
        &VALID.replace("whsec_c2VjcmV0LXNpZ25pbmcta2V5", "plain"),
        &[],
        "destinations[0].signing_secret",
    );
    assert_rejected_naming(
        &VALID.replace(r#"name = "stripe""#, r#"name = "../stripe""#),
        &[],
        "sources[0].name",
    );
    let short = format!("{VALID}\n[retention]\ndedupe_window = \"2days\"\n");
    assert_rejected_naming(&short, &[], "retention.dedupe_window");
    let forced = short.replace(
        "[retention]",
        "[retention]\nforce_short_dedupe_window = true",
    );
    assert!(check(&forced, &[]).status.success(), "forced explicitly");
    let sync = |level: &str| format!("[database]\nsqlite_synchronous = \"{level}\"\n{VALID}");
    assert!(check(&sync("normal"), &[]).status.success());
    assert!(check(&sync("full"), &[]).status.success());
    assert_rejected_naming(&sync("off"), &[], "database.sqlite_synchronous");
    let read = |url: &str, read: &str| {
        format!("[database]\nurl = \"{url}\"\nread_url = \"{read}\"\n{VALID}")
    };
    assert_rejected_naming(
        &read("sqlite://x.db", "postgres://h/db"),
        &[],
        "`database.read_url` is for PostgreSQL",
    );
    assert_rejected_naming(
        &read("postgres://h/db", "mysql://h/db"),
        &[],
        "`database.read_url` must start with postgres://",
    );
    assert!(
        check(&read("postgres://h/db", "postgres://replica/db"), &[])
            .status
            .success()
    );
    let window = |w: &str| format!("[worker]\nbatch_window = \"{w}\"\n{VALID}");
    assert!(check(&window("0s"), &[]).status.success(), "off");
    assert!(check(&window("20ms"), &[]).status.success());
    assert_rejected_naming(&window("2s"), &[], "worker.batch_window");
    assert_rejected_naming(&window("soon"), &[], "worker.batch_window");
    let token = |digest: &str| {
        format!("{VALID}\n[[admin.tokens]]\ntenant = \"acme\"\ntoken_sha256 = \"{digest}\"\n")
    };
    assert!(check(&token(&"ab".repeat(32)), &[]).status.success());
    for bad in ["", "abc", &"zz".repeat(32), &"ab".repeat(33)] {
        assert_rejected_naming(&token(bad), &[], "admin.tokens[0].token_sha256");
    }
    assert_rejected_naming(
        &VALID.replace(
            r#"url = "http://127.0.0.1:9000/x""#,
            "url = \"http://127.0.0.1:9000/x\"\nretry_schedule = [\"5 parsecs\"]",
        ),
        &[],
        "destinations[0].retry_schedule[0]",
    );
}

#[test]
fn secrets_can_come_from_the_environment_or_a_file() {
    let env_ref = VALID.replace("whsec_a", "env:HOOKGATE_TEST_STRIPE_SECRET");
    assert!(
        check(&env_ref, &[("HOOKGATE_TEST_STRIPE_SECRET", "whsec_x")])
            .status
            .success()
    );
    assert_rejected_naming(&env_ref, &[], "sources[0].secrets[0]");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secret");
    std::fs::write(&file, "whsec_from_file\n").unwrap();
    let file_ref = VALID.replace("whsec_a", &format!("file:{}", file.display()));
    assert!(check(&file_ref, &[]).status.success());
    let missing = VALID.replace("whsec_a", "file:/nonexistent/hookgate-secret");
    assert_rejected_naming(&missing, &[], "sources[0].secrets[0]");
}

#[test]
fn environment_overrides_apply_and_unknown_ones_are_refused() {
    assert_rejected_naming(
        VALID,
        &[("HOOKGATE__DATABASE__URL", "mysql://nope")],
        "database.url",
    );
    assert_rejected_naming(VALID, &[("HOOKGATE__SERVER__BOGUS", "1")], "bogus");
    assert!(check(
        VALID,
        &[("HOOKGATE__DATABASE__URL", "postgres://u@localhost/db")]
    )
    .status
    .success());
}

#[test]
fn migrate_creates_the_sqlite_schema() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let out = bin()
        .arg("migrate")
        .arg("--config")
        .arg(repo_file("hookgate.example.toml"))
        .env(
            "HOOKGATE__DATABASE__URL",
            format!("sqlite://{}", db.display()),
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tables: Vec<String> = rt.block_on(async {
        use sqlx::Connection as _;
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .fetch_all(&mut conn)
            .await
            .unwrap()
    });
    assert!(tables.iter().any(|t| t == "events"), "{tables:?}");
    assert!(tables.iter().any(|t| t == "jobs"), "{tables:?}");
    let journal: String = rt.block_on(async {
        use sqlx::Connection as _;
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut conn)
            .await
            .unwrap()
    });
    assert_eq!(journal, "wal", "the file was created in WAL mode");
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `serve` and returns it with the address from its first line of output, which is
/// "hookgate listening on http://127.0.0.1:PORT (store: ..., role: ...)".
fn spawn_serve(mut cmd: Command) -> (KillOnDrop, String, String) {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    // Keep draining, as a terminal would.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let address = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    (child, address, first)
}

/// The shell block between `<!-- curl-example -->` markers in the README.
fn readme_curl_example() -> String {
    let readme = std::fs::read_to_string(repo_file("README.md")).unwrap();
    let start = readme
        .find("<!-- curl-example -->")
        .expect("README has a curl example");
    let block = &readme[start..];
    let code = &block[block.find("```bash\n").unwrap() + 8..];
    code[..code.find("```").unwrap()].to_owned()
}

#[test]
fn serve_starts_on_the_example_config_and_accepts_the_readme_curl_example() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = bin();
    cmd.arg("serve")
        .arg("--config")
        .arg(repo_file("hookgate.example.toml"))
        .env(
            "HOOKGATE__DATABASE__URL",
            format!("sqlite://{}", dir.path().join("serve.db").display()),
        )
        .env("HOOKGATE__SERVER__LISTEN", "127.0.0.1:0");
    let (_child, address, first) = spawn_serve(cmd);
    assert!(first.contains("sqlite"), "{first}");

    let script = readme_curl_example().replace("http://127.0.0.1:8080", &address);
    let run = || {
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
    };
    let first = run();
    assert_eq!(first["duplicate"], false, "{first}");
    let again = run();
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["id"], first["id"]);
}

/// A one-thread HTTP sink answering 200 and keeping each request's head.
fn start_sink() -> (String, std::sync::mpsc::Receiver<String>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // Read the head, then as many body bytes as Content-Length says.
            let head_end = loop {
                let n = stream.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break None;
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break Some(i + 4);
                }
            };
            let Some(head_end) = head_end else { continue };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < head_end + len {
                let n = stream.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = tx.send(head);
        }
    });
    (url, rx)
}

hookgate_testkit::both_stores!(
    serve_delivers_to_destinations_and_stops_cleanly_on_sigterm,
    api_and_worker_roles_run_apart,
);

fn serve_delivers_to_destinations_and_stops_cleanly_on_sigterm(backend: hookgate_testkit::Backend) {
    let (sink_url, received) = start_sink();
    let dir = tempfile::tempdir().unwrap();
    let (_database, url) = hookgate_testkit::database_for_processes(backend, dir.path());
    let config = dir.path().join("hookgate.toml");
    // Polling every hour: delivery must come from the wake-up after ingest.
    let text = sink_config(&url, &sink_url, "1h");
    std::fs::write(&config, text).unwrap();
    let mut cmd = bin();
    cmd.arg("serve").arg("--config").arg(&config);
    let (mut child, address, _) = spawn_serve(cmd);

    let script = readme_curl_example().replace("http://127.0.0.1:8080", &address);
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let head = received
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the worker delivered the event");
    assert!(
        head.contains(&format!("webhook-id: {}", answer["id"].as_str().unwrap())),
        "{head}"
    );
    assert!(head.contains("webhook-signature: v1,"), "{head}");

    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.0.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let exit = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "serve did not stop on SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(exit.success(), "serve exited with {exit}");
}

fn sink_config(database_url: &str, sink_url: &str, poll_interval: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"

[database]
url = "{database_url}"

[worker]
poll_interval = "{poll_interval}"

[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["whsec_demo_stripe_secret"]
destinations = ["sink"]

[[destinations]]
name = "sink"
url = "{sink_url}"
signing_secret = "whsec_c2VjcmV0LXNpZ25pbmcta2V5"
"#
    )
}

fn api_and_worker_roles_run_apart(backend: hookgate_testkit::Backend) {
    let (sink_url, received) = start_sink();
    let dir = tempfile::tempdir().unwrap();
    let (_database, url) = hookgate_testkit::database_for_processes(backend, dir.path());
    let config = dir.path().join("hookgate.toml");
    std::fs::write(&config, sink_config(&url, &sink_url, "100ms")).unwrap();
    let serve = |role: &str| {
        let mut cmd = bin();
        cmd.arg("serve")
            .arg("--config")
            .arg(&config)
            .arg("--role")
            .arg(role);
        cmd
    };
    let (_api, address, first) = spawn_serve(serve("api"));
    assert!(first.contains("role: Api"), "{first}");
    let script = readme_curl_example().replace("http://127.0.0.1:8080", &address);
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["duplicate"], false);
    assert!(
        received
            .recv_timeout(std::time::Duration::from_millis(1500))
            .is_err(),
        "an api-only process delivers nothing"
    );

    let worker = bin()
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .arg("--role")
        .arg("worker")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _worker = KillOnDrop(worker);
    let head = received
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the worker process delivered the event stored by the api process");
    assert!(head.contains(answer["id"].as_str().unwrap()), "{head}");
}

#[test]
fn providers_dir_adds_definitions_and_bad_ones_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let providers = dir.path().join("providers");
    std::fs::create_dir(&providers).unwrap();
    std::fs::write(
        providers.join("acme.toml"),
        r#"
name = "acme"
[signature]
headers = ["X-Acme-Signature"]
algorithm = "hmac-sha512"
encoding = "base64"
[event]
id = ["header:X-Acme-Delivery"]
"#,
    )
    .unwrap();
    let with_dir = format!(
        "providers_dir = \"{}\"\n{}",
        providers.display(),
        VALID.replace(r#"provider = "stripe""#, r#"provider = "acme""#)
    );
    let out = check(&with_dir, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    std::fs::write(
        providers.join("acme.toml"),
        "name = \"acme\"\n[signature]\nheaders = [\"X\"]\nalgorithm = \"hmac-md5\"\nencoding = \"hex\"\n[event]\nid = [\"header:X-Id\"]\n",
    )
    .unwrap();
    assert_rejected_naming(&with_dir, &[], "acme.toml");
    assert_rejected_naming(&with_dir, &[], "algorithm");
    std::fs::write(
        providers.join("acme.toml"),
        "name = \"acme\"\n[signature]\nheaders = [\"X\"]\nalgorithm = \"hmac-sha256\"\nencoding = \"hex\"\nsigned_payload = \"{timestamp}.{body}\"\n[event]\nid = [\"header:X-Id\"]\n",
    )
    .unwrap();
    assert_rejected_naming(&with_dir, &[], "signature.signed_payload");
}
