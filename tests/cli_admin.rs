//! `hookgate events|replay|dead-letters|sources|destinations` run as the real binary against
//! a real `hookgate serve` (`--role api`, so nothing is delivered unless a test starts a
//! worker), each test once on SQLite and once on PostgreSQL.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use hookgate_testkit::Backend;
use serde_json::Value;
use sha2::{Digest, Sha256};

const TOKEN: &str = "hg_test_admin_token";
const STRIPE_SECRET: &str = "whsec_demo_stripe_secret";
const STRIPE_OLD_SECRET: &str = "whsec_previous_demo_stripe_secret";

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

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

hookgate_testkit::both_stores!(
    events_list_show_and_replay_through_the_admin_api,
    events_show_names_the_secret_that_verified,
    dead_letters_list_retry_and_discard_through_the_admin_api,
    errors_name_the_api_code_and_exit_non_zero,
    sources_shows_where_ids_come_from_and_no_secret,
    destinations_list_pause_and_resume_through_the_admin_api,
    quarantine_list_show_verify_and_discard_through_the_admin_api,
    reconcile_runs_one_reconciliation_through_the_admin_api,
);

/// A running `serve --role api` with its own database, and what the tests need to reach it.
/// Dropped in field order: the server before the database it uses.
struct Gateway {
    _server: KillOnDrop,
    _database: Option<hookgate_testkit::postgres::TestDatabase>,
    _dir: tempfile::TempDir,
    config: std::path::PathBuf,
    address: String,
}

/// Starts `serve` and returns it with the address from its first line of output, which is
/// "hookgate listening on http://127.0.0.1:PORT (store: ..., role: ...)".
fn spawn_serve(mut cmd: Command) -> (KillOnDrop, String) {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let address = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    (child, address)
}

fn config(database_url: &str, destination_url: &str) -> String {
    let digest = hex::encode(Sha256::digest(TOKEN.as_bytes()));
    format!(
        r#"
[server]
listen = "127.0.0.1:0"

[database]
url = "{database_url}"

[worker]
poll_interval = "1h"

[[admin.tokens]]
tenant = "default"
token_sha256 = "{digest}"

[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{STRIPE_SECRET}", "{STRIPE_OLD_SECRET}"]
destinations = ["billing"]

[[destinations]]
name = "billing"
url = "{destination_url}"
signing_secret = "whsec_c2VjcmV0LXNpZ25pbmcta2V5"
"#
    )
}

fn start_gateway(backend: Backend, destination_url: &str) -> Gateway {
    start_gateway_with(backend, destination_url, "")
}

/// As `start_gateway`, with `stripe_extra` added to the stripe source's tables.
fn start_gateway_with(backend: Backend, destination_url: &str, stripe_extra: &str) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("hookgate.toml");
    let (database, url) = hookgate_testkit::database_for_processes(backend, dir.path());
    let text = config(&url, destination_url).replacen(
        "[[destinations]]",
        &format!("{stripe_extra}\n[[destinations]]"),
        1,
    );
    std::fs::write(&config_path, text).unwrap();
    let mut cmd = bin();
    cmd.arg("serve")
        .arg("--config")
        .arg(&config_path)
        .arg("--role")
        .arg("api");
    let (server, address) = spawn_serve(cmd);
    Gateway {
        _server: server,
        _database: database,
        _dir: dir,
        config: config_path,
        address,
    }
}

impl Gateway {
    /// Posts a Stripe event signed like the README's curl example; returns hookgate's id.
    fn ingest(&self, body: &str) -> String {
        self.ingest_signed(STRIPE_SECRET, body)
    }

    /// Posts a Stripe event signed with `secret`; returns hookgate's id.
    fn ingest_signed(&self, secret: &str, body: &str) -> String {
        let (status, answer) = self.post_signed(secret, body);
        assert!(status.is_success(), "{status}");
        answer["id"].as_str().unwrap().to_owned()
    }

    /// Posts a Stripe event signed with `secret`; returns the status and the JSON answer.
    fn post_signed(&self, secret: &str, body: &str) -> (reqwest::StatusCode, Value) {
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{ts}.{body}").as_bytes());
        let signature = format!("t={ts},v1={}", hex::encode(mac.finalize().into_bytes()));
        let url = format!("{}/webhooks/stripe", self.address);
        let body = body.to_owned();
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(async move {
                let response = reqwest::Client::new()
                    .post(url)
                    .header("Content-Type", "application/json")
                    .header("Stripe-Signature", signature)
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                (response.status(), response.json().await.unwrap())
            })
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with_token(args, TOKEN)
    }

    fn run_with_token(&self, args: &[&str], token: &str) -> Output {
        bin()
            .args(args)
            .env("HOOKGATE_URL", &self.address)
            .env("HOOKGATE_ADMIN_TOKEN", token)
            .output()
            .unwrap()
    }

    /// Runs a command that must succeed; returns (stdout, stderr).
    fn ok(&self, args: &[&str]) -> (String, String) {
        let out = self.run(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "hookgate {args:?} failed:\n{stderr}{stdout}"
        );
        (stdout, stderr)
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut with_json = args.to_vec();
        with_json.push("--json");
        let (stdout, _) = self.ok(&with_json);
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    }

    /// Runs a command that must fail; returns its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "hookgate {args:?} succeeded");
        stderr
    }
}

fn stripe_event(id: &str, kind: &str) -> String {
    format!(r#"{{"id":"{id}","object":"event","type":"{kind}","note":"naïve ☃  "}}"#) + "\n"
}

fn events_list_show_and_replay_through_the_admin_api(backend: Backend) {
    let gw = start_gateway(backend, "http://127.0.0.1:9/x");
    let first_body = stripe_event("evt_cli_1", "invoice.paid");
    let first = gw.ingest(&first_body);
    gw.ingest(&stripe_event("evt_cli_2", "invoice.paid"));
    gw.ingest(&stripe_event("evt_cli_3", "customer.created"));

    let (table, _) = gw.ok(&["events", "list"]);
    assert!(table.starts_with("ID"), "{table}");
    assert!(table.contains("PROVIDER EVENT ID"), "{table}");
    for id in ["evt_cli_1", "evt_cli_2", "evt_cli_3", &first] {
        assert!(table.contains(id), "{id} missing from\n{table}");
    }
    let listed = gw.json(&["events", "list"]);
    assert_eq!(listed["data"].as_array().unwrap().len(), 3, "{listed}");
    let typed = gw.json(&["events", "list", "--event-type", "customer.created"]);
    assert_eq!(
        typed["data"][0]["provider_event_id"], "evt_cli_3",
        "{typed}"
    );
    assert_eq!(typed["data"].as_array().unwrap().len(), 1, "{typed}");

    // Pages: a hint with the cursor, and --all follows it to the end.
    let (page, hint) = gw.ok(&["events", "list", "--limit", "2"]);
    assert_eq!(page.lines().count(), 3, "{page}");
    assert!(hint.contains("--cursor "), "{hint}");
    let all = gw.json(&["events", "list", "--limit", "2", "--all"]);
    assert_eq!(all["data"].as_array().unwrap().len(), 3, "{all}");
    assert_eq!(all["next_cursor"], Value::Null);

    let (shown, _) = gw.ok(&["events", "show", &first]);
    assert!(shown.contains("evt_cli_1"), "{shown}");
    assert!(shown.contains("billing"), "the job's destination: {shown}");
    assert!(shown.contains("pending"), "{shown}");
    let detail = gw.json(&["events", "show", &first]);
    assert_eq!(detail["jobs"][0]["destination"], "billing", "{detail}");
    let raw = gw.run(&["events", "show", &first, "--raw"]);
    assert!(raw.status.success());
    assert_eq!(
        raw.stdout,
        first_body.as_bytes(),
        "--raw prints the exact bytes"
    );

    let replayed = gw.json(&["replay", &first]);
    let jobs = replayed["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{replayed}");
    assert_eq!(jobs[0]["destination"], "billing");
    assert_eq!(jobs[0]["status"], "pending");
    let (queued, note) = gw.ok(&["replay", &first, "--destination", "billing"]);
    assert!(queued.contains("queued 1 job(s)"), "{queued}");
    assert!(note.contains("Idempotency-Key: "), "{note}");
    let refused = gw.fails(&["replay", &first, "--destination", "nowhere"]);
    assert!(refused.contains("unprocessable"), "{refused}");

    let dry = gw.json(&["replay", "--source", "stripe", "--dry-run"]);
    assert_eq!(dry["matched"], 3, "{dry}");
    let (dry_text, _) = gw.ok(&["replay", "--source", "stripe", "--dry-run"]);
    assert!(dry_text.contains("3 event(s) match"), "{dry_text}");
    let (bulk, _) = gw.ok(&[
        "replay",
        "--source",
        "stripe",
        "--event-type",
        "invoice.paid",
    ]);
    assert!(bulk.contains("replayed 2 event(s)"), "{bulk}");
    let bulk = gw.json(&["replay", "--source", "stripe"]);
    assert_eq!(bulk["replayed"], 3, "{bulk}");
    // 1 original + 2 single replays + 2 bulk replays.
    let detail = gw.json(&["events", "show", &first]);
    assert_eq!(detail["jobs"].as_array().unwrap().len(), 5, "{detail}");

    let (empty, _) = gw.ok(&["dead-letters", "list"]);
    assert_eq!(empty, "no dead letters\n");
}

/// A one-thread HTTP server answering 410 Gone, which fails a delivery job at once.
fn start_gone_sink() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let _ = stream
                .write_all(b"HTTP/1.1 410 Gone\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    url
}

fn events_show_names_the_secret_that_verified(backend: Backend) {
    let gw = start_gateway(backend, "http://127.0.0.1:9/x");
    let current = gw.ingest(&stripe_event("evt_cli_current", "invoice.paid"));
    let old = gw.ingest_signed(
        STRIPE_OLD_SECRET,
        &stripe_event("evt_cli_old", "invoice.paid"),
    );
    let (shown, _) = gw.ok(&["events", "show", &current]);
    assert!(
        shown.contains("verified secret    0 (the first of the source's secrets)"),
        "{shown}"
    );
    let (shown, _) = gw.ok(&["events", "show", &old]);
    assert!(
        shown.contains("verified secret    1 (0 = the first"),
        "{shown}"
    );
    assert_eq!(
        gw.json(&["events", "show", &old])["verified_secret_index"],
        1
    );
}

fn sources_shows_where_ids_come_from_and_no_secret(backend: Backend) {
    let gw = start_gateway(backend, "http://127.0.0.1:9/x");
    let (table, _) = gw.ok(&["sources"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("SOURCE"), "{table}");
    assert!(lines[1].starts_with("stripe"), "{table}");
    for column in ["hmac-sha256", "json:/id", "json:/type"] {
        assert!(lines[1].contains(column), "{column} missing from {table}");
    }
    let json = gw.json(&["sources"]);
    assert_eq!(json["data"][0]["secrets"], 2);
    assert_eq!(json["data"][0]["event_id"], serde_json::json!(["json:/id"]));
    assert!(!table.contains(STRIPE_SECRET) && !json.to_string().contains(STRIPE_SECRET));
}

fn destinations_list_pause_and_resume_through_the_admin_api(backend: Backend) {
    let gw = start_gateway(backend, "http://127.0.0.1:9/x");
    gw.ingest(&stripe_event("evt_dest_1", "invoice.paid"));
    let (table, _) = gw.ok(&["destinations", "list"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("FAILURE STREAK"),
        "{table}"
    );
    assert!(lines[1].contains("active"), "{table}");

    let (paused, _) = gw.ok(&["destinations", "pause", "billing"]);
    assert!(paused.contains("destination billing is paused"), "{paused}");
    let json = gw.json(&["destinations", "list"]);
    assert_eq!(json["data"][0]["state"], "paused");
    assert_eq!(json["data"][0]["jobs_due"], 1);
    let (resumed, _) = gw.ok(&["destinations", "resume", "billing"]);
    assert!(
        resumed.contains("destination billing is active"),
        "{resumed}"
    );
    assert_eq!(
        gw.json(&["destinations", "list"])["data"][0]["state"],
        "active"
    );
}

fn dead_letters_list_retry_and_discard_through_the_admin_api(backend: Backend) {
    let gw = start_gateway(backend, &start_gone_sink());
    let events: Vec<String> = (1..=3)
        .map(|i| gw.ingest(&stripe_event(&format!("evt_dead_{i}"), "invoice.paid")))
        .collect();

    // A worker for a moment, so the three jobs meet the 410 and become dead letters.
    let worker = bin()
        .arg("serve")
        .arg("--config")
        .arg(&gw.config)
        .arg("--role")
        .arg("worker")
        .env("HOOKGATE__WORKER__POLL_INTERVAL", "100ms")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let worker = KillOnDrop(worker);
    let deadline = Instant::now() + Duration::from_secs(30);
    let dead = loop {
        let page = gw.json(&["dead-letters", "list"]);
        if page["data"].as_array().unwrap().len() == 3 {
            break page;
        }
        assert!(Instant::now() < deadline, "no dead letters: {page}");
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(worker);
    let job_of = |event: &str| -> String {
        dead["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["event"]["id"] == event)
            .unwrap_or_else(|| panic!("no dead letter for {event}: {dead}"))["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let jobs: Vec<String> = events.iter().map(|e| job_of(e)).collect();

    let (table, _) = gw.ok(&["dead-letters", "list", "--source", "stripe"]);
    assert!(table.starts_with("JOB ID"), "{table}");
    assert!(table.contains("HTTP 410"), "{table}");
    for id in jobs.iter().chain(&events) {
        assert!(table.contains(id.as_str()), "{id} missing from\n{table}");
    }
    let (shown, _) = gw.ok(&["events", "show", &events[0]]);
    assert!(shown.contains("attempts of job"), "{shown}");
    assert!(shown.contains("HTTP 410"), "{shown}");

    let (retried, note) = gw.ok(&["dead-letters", "retry", &jobs[0]]);
    assert!(retried.contains("pending again"), "{retried}");
    assert!(note.contains("Idempotency-Key: cli-"), "{note}");
    let (discarded, _) = gw.ok(&["dead-letters", "discard", &jobs[1]]);
    assert!(discarded.contains(&jobs[1]), "{discarded}");
    let again = gw.fails(&["dead-letters", "discard", &jobs[1]]);
    assert!(again.contains("conflict"), "{again}");
    assert!(again.contains("(HTTP 409)"), "{again}");

    // The same key twice acts once and answers the same.
    let bulk = ["dead-letters", "retry", "--source", "stripe"];
    let keyed = [&bulk[..], &["--idempotency-key", "test-bulk-retry-1"]].concat();
    let (first, _) = gw.ok(&keyed);
    assert_eq!(first, "retried 1 dead letter(s)\n");
    let (repeat, note) = gw.ok(&keyed);
    assert_eq!(repeat, first);
    assert!(note.contains("used before"), "{note}");
    let none = gw.json(&bulk);
    assert_eq!(none["retried"], 0, "{none}");

    let (empty, _) = gw.ok(&["dead-letters", "list"]);
    assert_eq!(empty, "no dead letters\n");
    let detail = gw.json(&["events", "show", &events[1]]);
    assert!(detail["jobs"][0]["discarded_at"].is_string(), "{detail}");
}

fn errors_name_the_api_code_and_exit_non_zero(backend: Backend) {
    let gw = start_gateway(backend, "http://127.0.0.1:9/x");

    let out = gw.run_with_token(&["events", "list"], "not-the-token");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("error: unauthorized: "), "{stderr}");
    assert!(stderr.contains("(HTTP 401)"), "{stderr}");

    let missing = gw.fails(&["events", "show", "0190f3a4-0000-7000-8000-000000000000"]);
    assert!(missing.contains("not_found"), "{missing}");
    assert!(missing.contains("(HTTP 404)"), "{missing}");

    let bad_cursor = gw.fails(&["events", "list", "--cursor", "nope"]);
    assert!(bad_cursor.contains("bad_request"), "{bad_cursor}");

    // No filter at all is refused before anything is sent.
    let unfiltered = gw.fails(&["replay"]);
    assert!(unfiltered.contains("<ID>"), "{unfiltered}");

    let out = bin()
        .args([
            "events",
            "list",
            "--url",
            "http://127.0.0.1:9",
            "--token",
            TOKEN,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("could not connect to hookgate at http://127.0.0.1:9/"),
        "{stderr}"
    );
}

fn quarantine_list_show_verify_and_discard_through_the_admin_api(backend: Backend) {
    let gw = start_gateway(backend, "http://127.0.0.1:9/x");
    let body = stripe_event("evt_quarantined", "invoice.paid");
    let (status, _) = gw.post_signed("whsec_rotated_at_stripe_first", &body);
    assert_eq!(status, 401);
    // The request is kept off the ingest path, so it shows up a moment after the answer.
    let deadline = Instant::now() + Duration::from_secs(10);
    let listed = loop {
        let json = gw.json(&["quarantine", "list"]);
        if json["data"].as_array().is_some_and(|d| !d.is_empty()) || Instant::now() > deadline {
            break json;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let id = listed["data"][0]["id"].as_str().unwrap().to_owned();
    let (table, _) = gw.ok(&["quarantine", "list", "--source", "stripe"]);
    assert!(
        table.starts_with("ID") && table.contains("invalid_signature"),
        "{table}"
    );

    let (shown, _) = gw.ok(&["quarantine", "show", &id]);
    assert!(shown.contains("stripe-signature: t="), "{shown}");
    assert!(shown.contains("evt_quarantined"), "{shown}");

    let (one, _) = gw.ok(&["quarantine", "verify", &id]);
    assert_eq!(one, "still refused (invalid_signature); it stays\n");
    let (all, _) = gw.ok(&["quarantine", "verify", "--all", "--source", "stripe"]);
    assert!(
        all.contains("ingested 0") && all.contains("still refused 1"),
        "{all}"
    );
    assert_eq!(gw.json(&["quarantine", "list"])["data"][0]["checks"], 3);

    let (discarded, _) = gw.ok(&["quarantine", "discard", &id]);
    assert!(discarded.starts_with("discarded request"), "{discarded}");
    let (empty, _) = gw.ok(&["quarantine", "list"]);
    assert_eq!(empty, "the quarantine is empty\n");
    assert!(gw.fails(&["quarantine", "show", &id]).contains("not_found"));
}

fn reconcile_runs_one_reconciliation_through_the_admin_api(backend: Backend) {
    use hookgate_testkit::fake_providers::FakeProviders;
    const API_KEY: &str = "sk_test_cli_reconcile_key_0123456789";
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(FakeProviders::start(API_KEY));
    let gw = start_gateway_with(
        backend,
        "http://127.0.0.1:9/x",
        &format!(
            "[sources.reconcile]\napi_key = \"{API_KEY}\"\napi_base = \"{}\"\n",
            fake.base
        ),
    );
    gw.ingest(&stripe_event("evt_cli_seen", "invoice.paid"));
    fake.add_stripe_event("evt_cli_seen", "invoice.paid");
    fake.add_stripe_event("evt_cli_lost", "invoice.paid");
    let (text, _) = gw.ok(&["reconcile", "--source", "stripe"]);
    assert!(
        text.contains("2 listed") && text.contains("1 missing") && text.contains("1 recovered"),
        "{text}"
    );
    let since = (chrono::Utc::now() - chrono::TimeDelta::hours(1)).to_rfc3339();
    let json = gw.json(&["reconcile", "--source", "stripe", "--since", &since]);
    assert_eq!(
        (json["listed"].as_i64(), json["missing"].as_i64()),
        (Some(2), Some(0))
    );
    let listing = fake.requests().pop().unwrap();
    let gte: i64 = listing.query["created[gte]"].parse().unwrap();
    assert!(
        (gte - (chrono::Utc::now().timestamp() - 3600)).abs() < 60,
        "{gte}"
    );
    let stderr = gw.fails(&["reconcile", "--source", "nope"]);
    assert!(stderr.contains("not_found"), "{stderr}");
    assert!(!text.contains(API_KEY));
}
