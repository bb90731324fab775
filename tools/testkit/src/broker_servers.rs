//! Brokers of a test's own, for the tests that kill one: a `nats-server` with JetStream and a
//! RabbitMQ node, each on free ports with its data in a temporary directory, killed with
//! SIGKILL and started again on the same ports and data. The machine's shared brokers are
//! never restarted, so other tests running at the same time see nothing.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn free_port() -> u16 {
    hookgate_pgcluster::free_port().expect("a free port")
}

/// Waits until something listens on `port`, for at most `within`.
async fn listening(port: u16, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing listens on port {port} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A `nats-server -js` of the test's own.
pub struct NatsServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl NatsServer {
    pub async fn start() -> Self {
        let mut server = Self {
            port: free_port(),
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
        };
        server.restart().await;
        server
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// SIGKILL: no flush, no goodbye to clients.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it (again) on the same port and store directory.
    pub async fn restart(&mut self) {
        self.kill();
        let child = Command::new("nats-server")
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts (it is installed with the machine's NATS)");
        self.child = Some(child);
        listening(self.port, Duration::from_secs(20)).await;
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A RabbitMQ node of the test's own (its own node name, ports, database and logs).
pub struct RabbitServer {
    pub port: u16,
    dist_port: u16,
    node: String,
    dir: tempfile::TempDir,
    running: bool,
}

impl RabbitServer {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        // The broker runs as its own user, which must write here.
        set_mode(dir.path(), 0o777);
        let port = free_port();
        let config = dir.path().join("rabbitmq.conf");
        std::fs::write(
            &config,
            format!("listeners.tcp.local = 127.0.0.1:{port}\nloopback_users = none\n"),
        )
        .expect("write the node's config");
        set_mode(&config, 0o644);
        let mut server = Self {
            port,
            dist_port: free_port(),
            node: format!(
                "hgtest-{}@localhost",
                &uuid::Uuid::now_v7().simple().to_string()[20..]
            ),
            dir,
            running: false,
        };
        server.restart().await;
        server
    }

    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// SIGKILL of the node's Erlang VM.
    pub fn kill(&mut self) {
        if !self.running {
            return;
        }
        if let Ok(pid) = std::fs::read_to_string(self.path("pid")) {
            let _ = Command::new("kill").args(["-9", pid.trim()]).status();
        }
        let _ = std::fs::remove_file(self.path("pid"));
        self.running = false;
        // The port is free again once the VM is gone.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts it (again) with the same node name, ports and database.
    pub async fn restart(&mut self) {
        self.kill();
        let status = Command::new("rabbitmq-server")
            .arg("-detached")
            .env("RABBITMQ_CONFIG_FILE", self.path("rabbitmq.conf"))
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", self.path("mnesia"))
            .env("RABBITMQ_LOG_BASE", self.path("log"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", self.path("plugins"))
            .env("RABBITMQ_PID_FILE", self.path("pid"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("rabbitmq-server starts (it is installed with the machine's RabbitMQ)");
        assert!(status.success(), "rabbitmq-server -detached: {status}");
        self.running = true;
        listening(self.port, Duration::from_secs(60)).await;
    }
}

impl Drop for RabbitServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}
