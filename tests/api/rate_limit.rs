//! A destination's delivery rate limit (`rate_limit = "20/s"`): a token bucket in the
//! database, so the rate holds over every worker process on it. Measured at the sink: the
//! rate between the first and the last delivery is within 10 % of the limit.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::both_backends;
use crate::support::sink::{Received, Sink};
use crate::support::{spawn_app_with_sink, Backend, TestApp};

both_backends!(a_rate_limited_destination_is_delivered_at_its_rate,);

const LIMIT: f64 = 20.0;

/// Deliveries per second between the first and the last arrival.
fn measured_rate(received: &[Received]) -> f64 {
    let first = received.iter().map(|r| r.at).min().unwrap();
    let last = received.iter().map(|r| r.at).max().unwrap();
    (received.len() - 1) as f64 / (last - first).as_secs_f64()
}

fn assert_near_limit(received: &[Received]) {
    let rate = measured_rate(received);
    assert!(
        (rate - LIMIT).abs() <= LIMIT * 0.1,
        "{rate:.2} deliveries/s for a limit of {LIMIT}/s"
    );
}

async fn rate_limited_app(backend: Backend, sink: &Sink) -> TestApp {
    spawn_app_with_sink(backend, sink, |s| {
        s.sources[0].destinations = vec!["billing".into()];
        let billing = s
            .destinations
            .iter_mut()
            .find(|d| d.name == "billing")
            .unwrap();
        billing.rate_limit = Some(format!("{LIMIT}/s"));
    })
    .await
}

async fn a_rate_limited_destination_is_delivered_at_its_rate(backend: Backend) {
    let sink = Sink::start().await;
    let app = rate_limited_app(backend, &sink).await;
    app.ingest_stripes("evt_rate", 40).await;
    let worker = app.start_worker();
    let received = sink.wait_for("/billing", 40, Duration::from_secs(30)).await;
    worker.stop().await;
    assert_eq!(received.len(), 40);
    assert_near_limit(&received);
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Two `hookgate serve --role worker` processes on one PostgreSQL database share the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_worker_processes_share_one_rate_limit() {
    let sink = Sink::start().await;
    let app = rate_limited_app(Backend::Postgres, &sink).await;
    app.ingest_stripes("evt_shared_rate", 60).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("worker.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[database]
url = "{url}"

[worker]
poll_interval = "100ms"

[[destinations]]
name = "billing"
url = "{sink}"
signing_secret = "whsec_dGVzdC1iaWxsaW5nLXNpZ25pbmcta2V5"
rate_limit = "{LIMIT}/s"
"#,
            url = app.database_url,
            sink = sink.url("/billing"),
        ),
    )
    .unwrap();
    let workers: Vec<KillOnDrop> = (0..2)
        .map(|_| {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_hookgate"));
            for (k, _) in std::env::vars() {
                if k.starts_with("HOOKGATE") {
                    cmd.env_remove(k);
                }
            }
            KillOnDrop(
                cmd.arg("serve")
                    .arg("--config")
                    .arg(&config)
                    .arg("--role")
                    .arg("worker")
                    .env("HOOKGATE__SERVER__LISTEN", "127.0.0.1:0")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    let received = sink.wait_for("/billing", 60, Duration::from_secs(30)).await;
    drop(workers);
    assert_eq!(received.len(), 60);
    assert_near_limit(&received);
}
