//! `hookgate listen` receives what `serve` delivers after `send`, and says whether the
//! signature verified.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use super::{bin, sink_config, spawn_serve, KillOnDrop};

/// Starts `listen` with `args` and returns it, its address and its further stdout lines.
fn spawn_listen(args: &[&str]) -> (KillOnDrop, String, Receiver<String>) {
    spawn_listen_expecting(args, "hookgate listen: receiving on http://")
}

/// `spawn_listen`, checking that the first line contains `expected`.
fn spawn_listen_expecting(args: &[&str], expected: &str) -> (KillOnDrop, String, Receiver<String>) {
    let child = bin()
        .arg("listen")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.contains(expected), "{first:?}");
    let address = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, address, rx)
}

fn next_line(lines: &Receiver<String>) -> String {
    lines
        .recv_timeout(Duration::from_secs(20))
        .expect("listen printed a line")
}

#[test]
fn listen_receives_and_verifies_what_serve_delivers_after_send() {
    let dir = tempfile::tempdir().unwrap();
    // The quick start's store: what is tested is `listen`, not the store.
    let db = format!("sqlite://{}", dir.path().join("listen.db").display());
    // The secret comes from the configuration; the real address is known once listen runs.
    let listen_config = dir.path().join("listen.toml");
    std::fs::write(
        &listen_config,
        sink_config(&db, "http://127.0.0.1:9/", "1h"),
    )
    .unwrap();
    let (_listen, listen_url, lines) = spawn_listen(&[
        "--config",
        listen_config.to_str().unwrap(),
        "--destination",
        "sink",
        "--listen",
        "127.0.0.1:0",
    ]);
    let config = dir.path().join("hookgate.toml");
    let sink_url = format!("{listen_url}/hook");
    std::fs::write(&config, sink_config(&db, &sink_url, "1h")).unwrap();
    let mut serve = bin();
    serve.arg("serve").arg("--config").arg(&config);
    let (_serve, address, _) = spawn_serve(serve);

    let out = bin()
        .args(["send", "--source", "stripe", "--event", "invoice.paid"])
        .arg("--config")
        .arg(&config)
        .arg("--url")
        .arg(&address)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let answer: serde_json::Value =
        serde_json::from_str(stdout.trim_start_matches("200 ")).unwrap();
    let id = answer["id"].as_str().unwrap();

    let line = next_line(&lines);
    for part in [
        "POST /hook",
        &format!("event={id:?}"),
        r#"source="stripe""#,
        r#"type="invoice.paid""#,
        r#"attempt="1""#,
        "verified (sink)",
    ] {
        assert!(line.contains(part), "{part} not in {line:?}");
    }
    assert!(!line.contains("NOT VERIFIED"), "{line}");

    // A request signed with another key is refused with 401 and printed as such.
    let forged = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
        .args(["-H", "webhook-id: msg_forged"])
        .arg("-H")
        .arg(format!(
            "webhook-timestamp: {}",
            chrono::Utc::now().timestamp()
        ))
        .args(["-H", "webhook-signature: v1,Zm9yZ2VkLXNpZ25hdHVyZQ=="])
        .args(["--data-binary", "{\"forged\":true}"])
        .arg(&sink_url)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&forged.stdout), "401");
    let line = next_line(&lines);
    assert!(
        line.contains(r#"event="msg_forged""#) && line.contains("NOT VERIFIED"),
        "{line}"
    );
    assert!(
        !line.contains("{\"forged\""),
        "no body without --print-body"
    );
}

#[test]
fn listen_prints_bodies_only_when_asked_and_refuses_bad_secrets() {
    let secret = "whsec_c2VjcmV0LXNpZ25pbmcta2V5";
    let (_listen, url, lines) = spawn_listen(&[
        "--secret",
        secret,
        "--listen",
        "127.0.0.1:0",
        "--print-body",
    ]);
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
        .args(["--data-binary", "{\"unsigned\":true}"])
        .arg(&url)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "401");
    assert!(next_line(&lines).contains("NOT VERIFIED (missing"));
    assert_eq!(next_line(&lines), r#"{"unsigned":true}"#);

    // Without --destination, every destination's secret verifies (the README's quick start).
    let example = super::repo_file("hookgate.example.toml");
    let (_all, _, _) = spawn_listen_expecting(
        &[
            "--config",
            example.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        "verifying with billing, ci",
    );

    let out = bin()
        .args(["listen", "--secret", "not-a-whsec-secret"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--secret must be"));
    let out = bin().arg("listen").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to verify with"));
}
