//! What the process prints: JSON lines only in JSON mode, no colour codes when the output
//! is not a terminal, and a start-up error's causes once each.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use super::{bin, repo_file, KillOnDrop};

/// Runs `serve` on the example config until it has printed its banner and stored one
/// webhook, stops it with SIGTERM, and returns everything it printed (stdout, stderr).
fn serve_once(extra: &[&str], env: &[(&str, &str)]) -> (Vec<String>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = bin();
    cmd.arg("serve")
        .arg("--config")
        .arg(repo_file("hookgate.example.toml"))
        .args(extra)
        .env(
            "HOOKGATE__DATABASE__URL",
            format!("sqlite://{}", dir.path().join("out.db").display()),
        )
        .env("HOOKGATE__SERVER__LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = KillOnDrop(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let address = first
        .split(['"', ' '])
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    let out = bin()
        .args(["send", "--source", "stripe", "--event", "invoice.paid"])
        .arg("--config")
        .arg(repo_file("hookgate.example.toml"))
        .arg("--url")
        .arg(&address)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.0.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    // Both pipes close when the process exits.
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let mut stderr = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(child.0.wait().unwrap().success());
    let mut lines = vec![first.trim_end().to_owned()];
    lines.extend(rest.lines().map(str::to_owned));
    (lines, stderr)
}

#[test]
fn json_mode_prints_only_json_lines() {
    for (extra, env) in [
        (&["--log-format", "json"][..], &[][..]),
        (&[][..], &[("HOOKGATE__LOG__FORMAT", "json")][..]),
    ] {
        let (stdout, stderr) = serve_once(extra, env);
        let stderr: Vec<String> = stderr.lines().map(str::to_owned).collect();
        assert!(
            stderr.iter().any(|l| l.contains("shutting down")),
            "{stderr:?}"
        );
        for line in stdout.iter().chain(&stderr) {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"));
            assert!(v["fields"]["message"].is_string(), "{line}");
        }
        let first: serde_json::Value = serde_json::from_str(&stdout[0]).unwrap();
        assert_eq!(first["fields"]["message"], "hookgate listening");
        assert_eq!(first["fields"]["store"], "sqlite");
        assert!(stdout
            .iter()
            .any(|l| l.contains(r#""source":"stripe""#) && l.contains("/webhooks/stripe")));
    }
}

#[test]
fn text_logs_carry_no_colour_codes_when_not_a_terminal() {
    let (stdout, stderr) = serve_once(&[], &[]);
    assert!(
        stdout[0].starts_with("hookgate listening on http://"),
        "{stdout:?}"
    );
    assert!(stderr.contains("shutting down"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "ANSI escape in {stderr:?}");
}

#[test]
fn a_start_up_error_names_each_cause_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    for json in [false, true] {
        let mut cmd = bin();
        cmd.arg("serve")
            .arg("--config")
            .arg(repo_file("hookgate.example.toml"))
            .env(
                "HOOKGATE__DATABASE__URL",
                format!("sqlite://{}", dir.path().join("busy.db").display()),
            )
            .env("HOOKGATE__SERVER__LISTEN", &address);
        if json {
            cmd.args(["--log-format", "json"]);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.matches("Address already in use").count(),
            1,
            "{stderr}"
        );
        assert!(stderr.contains(&address), "{stderr}");
        if json {
            for line in stderr.lines() {
                let v: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"));
                if v["level"] == "ERROR" {
                    assert!(v["fields"]["message"].as_str().unwrap().contains(&address));
                }
            }
        }
    }
}

/// The banner says where `/metrics` is served, and whether it needs a token, when
/// `[metrics]` moves it off the main address.
#[test]
fn the_banner_names_the_metrics_address() {
    let (stdout, _) = serve_once(
        &[],
        &[
            ("HOOKGATE__METRICS__LISTEN", "127.0.0.1:0"),
            ("HOOKGATE__METRICS__TOKEN", "scrape-me"),
        ],
    );
    let line = stdout
        .iter()
        .find(|l| l.contains("metrics at"))
        .unwrap_or_else(|| panic!("no metrics line in {stdout:?}"));
    assert!(line.ends_with("/metrics (bearer token required)"), "{line}");
    let main = stdout[0]
        .split(' ')
        .find(|w| w.starts_with("http://"))
        .unwrap();
    assert!(!line.contains(main), "on its own address: {line} vs {main}");
    // Without [metrics], the main address and no token.
    let (stdout, _) = serve_once(&[], &[]);
    let line = stdout.iter().find(|l| l.contains("metrics at")).unwrap();
    assert!(line.ends_with("/metrics"), "{line}");
}
