//! `hookgate send` signs events every demo source accepts, and the README's `send`
//! commands work with the bodies in examples/.

use super::{bin, repo_file, spawn_serve};

#[test]
fn send_signs_test_events_that_every_demo_source_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = bin();
    cmd.arg("serve")
        .arg("--config")
        .arg(repo_file("hookgate.example.toml"))
        .arg("--role")
        .arg("api")
        .env(
            "HOOKGATE__DATABASE__URL",
            format!("sqlite://{}", dir.path().join("send.db").display()),
        )
        .env("HOOKGATE__SERVER__LISTEN", "127.0.0.1:0");
    let (_child, address, _) = spawn_serve(cmd);
    let send = |extra: &[&str]| {
        bin()
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .arg("send")
            .arg("--config")
            .arg(repo_file("hookgate.example.toml"))
            .arg("--url")
            .arg(&address)
            .args(extra)
            .output()
            .unwrap()
    };
    let demo = [
        "stripe", "github", "svix", "generic", "twilio", "meta", "discord",
    ];
    for source in demo {
        let out = send(&["--source", source, "--event", "invoice.paid"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{source}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Twilio and Discord get the answer their provider expects (TwiML, a deferred
        // interaction) instead of hookgate's JSON.
        let answer = match source {
            "twilio" => "<Response/>",
            "discord" => r#"{"type":5}"#,
            _ => r#""duplicate":false"#,
        };
        assert!(
            stdout.starts_with("200 ") && stdout.contains(answer),
            "{source}: {stdout}"
        );
    }
    // A body from a file keeps its own id: sent twice, the second is a duplicate.
    let body = dir.path().join("event.json");
    std::fs::write(&body, r#"{"id":"evt_from_file","type":"charge.refunded"}"#).unwrap();
    for duplicate in [false, true] {
        let out = send(&["--source", "stripe", "--body", body.to_str().unwrap()]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!(r#""duplicate":{duplicate}"#)),
            "{stdout}"
        );
    }
    // The README's `send` commands, with the bodies that ship in examples/.
    let readme = std::fs::read_to_string(repo_file("README.md")).unwrap();
    let commands: Vec<&str> = readme
        .lines()
        .filter_map(|l| {
            l.strip_prefix("cargo run --release -- send --config hookgate.example.toml ")
        })
        .collect();
    assert!(
        commands.iter().any(|c| c.contains("--body examples/")),
        "{commands:?}"
    );
    for command in commands {
        let out = send(&command.split_whitespace().collect::<Vec<_>>());
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.starts_with("200 "),
            "{command}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = send(&["--source", "nope"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no source named"));
}
