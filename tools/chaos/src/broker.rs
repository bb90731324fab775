//! The broker under chaos: a `nats-server` with JetStream of the run's own (free port, store
//! in the run directory), which the fault loop kills with SIGKILL and starts again. Every
//! source also routes to the `bus` destination, a JetStream stream here; after the drain the
//! checker reads the stream back and wants every stored event on it exactly once: the
//! stream's duplicate window absorbs every republish of one job (its `Nats-Msg-Id` is the
//! job's id), and nothing the stream acknowledged may be missing.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream;
use serde::Serialize;

pub const STREAM: &str = "CHAOS";
pub const SUBJECT_PREFIX: &str = "chaos";
/// Far longer than any gap between two publishes of one job in a run (lease, reconcile
/// interval, retry delays of the faults' length).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(15 * 60);

pub struct Broker {
    pub port: u16,
    dir: PathBuf,
    child: Mutex<Option<Child>>,
}

impl Broker {
    pub async fn start(dir: PathBuf) -> anyhow::Result<Broker> {
        std::fs::create_dir_all(&dir)?;
        let broker = Broker {
            port: crate::cluster::free_port()?,
            dir,
            child: Mutex::new(None),
        };
        broker.spawn()?;
        broker.wait_listening(Duration::from_secs(20)).await?;
        let js = broker.jetstream().await?;
        js.create_stream(jetstream::stream::Config {
            name: STREAM.into(),
            subjects: vec![format!("{SUBJECT_PREFIX}.>")],
            storage: jetstream::stream::StorageType::File,
            duplicate_window: DUPLICATE_WINDOW,
            ..Default::default()
        })
        .await
        .context("create the chaos stream")?;
        Ok(broker)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn spawn(&self) -> anyhow::Result<()> {
        let child = Command::new("nats-server")
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start nats-server (Debian's nats-server package)")?;
        *self.child.lock().unwrap() = Some(child);
        Ok(())
    }

    async fn wait_listening(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "nats-server does not listen on {} after {within:?}",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    async fn jetstream(&self) -> anyhow::Result<jetstream::Context> {
        Ok(jetstream::new(async_nats::connect(self.url()).await?))
    }

    /// SIGKILL: no flush, no goodbye to the gateway's clients.
    pub fn kill9(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again (a no-op when it runs) on the same port and store.
    pub async fn ensure_running(&self) -> anyhow::Result<()> {
        if self.child.lock().unwrap().is_none() {
            self.spawn()?;
        }
        self.wait_listening(Duration::from_secs(20)).await
    }

    /// Every message of the stream: (hookgate event id, delivery id).
    pub async fn messages(&self) -> anyhow::Result<Vec<(String, String)>> {
        let js = self.jetstream().await?;
        let mut stream = js.get_stream(STREAM).await?;
        let last = stream.info().await?.state.last_sequence;
        let mut out = Vec::with_capacity(last as usize);
        for seq in 1..=last {
            let Ok(m) = stream.get_raw_message(seq).await else {
                continue;
            };
            let header = |name: &str| {
                m.headers
                    .get(name)
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            };
            out.push((header("hookgate-event-id"), header("Nats-Msg-Id")));
        }
        Ok(out)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The stream against what both databases hold.
#[derive(Debug, Default, Clone, Serialize)]
pub struct BrokerFindings {
    pub stored_events: u64,
    pub messages: u64,
    /// Stored events with no message on the stream.
    pub missing: Vec<String>,
    /// Events on the stream more than once.
    pub duplicated: Vec<String>,
    /// Messages of events neither database holds.
    pub unexpected: Vec<String>,
}

impl BrokerFindings {
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        for (name, items) in [
            (
                "stored events missing from the broker stream",
                &self.missing,
            ),
            (
                "events on the broker stream more than once",
                &self.duplicated,
            ),
            ("broker messages of events never stored", &self.unexpected),
        ] {
            if !items.is_empty() {
                let sample: Vec<&str> = items.iter().take(3).map(String::as_str).collect();
                v.push(format!(
                    "{name}: {} (e.g. {})",
                    items.len(),
                    sample.join("; ")
                ));
            }
        }
        v
    }
}

/// `stored`: hookgate event ids of both databases.
pub fn check(stored: &[&String], messages: &[(String, String)]) -> BrokerFindings {
    let mut on_stream: HashMap<&str, u64> = HashMap::new();
    for (event, _) in messages {
        *on_stream.entry(event.as_str()).or_default() += 1;
    }
    let mut f = BrokerFindings {
        stored_events: stored.len() as u64,
        messages: messages.len() as u64,
        ..Default::default()
    };
    let stored_set: std::collections::HashSet<&str> = stored.iter().map(|s| s.as_str()).collect();
    for id in stored {
        match on_stream.get(id.as_str()) {
            None => f.missing.push((*id).clone()),
            Some(n) if *n > 1 => f.duplicated.push(format!("{id} x{n}")),
            Some(_) => {}
        }
    }
    let unexpected: BTreeMap<&str, u64> = on_stream
        .into_iter()
        .filter(|(id, _)| !stored_set.contains(id))
        .collect();
    f.unexpected = unexpected.keys().map(|s| (*s).to_owned()).collect();
    f.missing.sort();
    f.duplicated.sort();
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_missing_duplicated_and_unexpected_messages() {
        let (a, b, c) = ("a".to_owned(), "b".to_owned(), "c".to_owned());
        let stored = vec![&a, &b, &c];
        let m = |e: &str, d: &str| (e.to_owned(), d.to_owned());
        let clean = check(&stored, &[m("a", "1"), m("b", "2"), m("c", "3")]);
        assert!(clean.violations().is_empty());
        let bad = check(
            &stored,
            &[m("a", "1"), m("a", "1"), m("x", "9"), m("c", "3")],
        );
        assert_eq!(bad.missing, ["b"]);
        assert_eq!(bad.duplicated, ["a x2"]);
        assert_eq!(bad.unexpected, ["x"]);
        assert_eq!(bad.violations().len(), 3);
    }
}
