//! hookgate-testkit, the integration tests' kit: the real server on port 0 against a real,
//! fresh database of either backend (`spawn_app*`, `TestApp`), the PostgreSQL harness
//! (`postgres`: the local server or a throwaway cluster), a recording sink, signers, raw
//! connections and the two-store test macro (`both_backends!`). The gateway's tests use it
//! as a dev-dependency; it is a member crate so that no test includes it by `#[path]`.

pub mod broker_servers;
/// Throwaway PostgreSQL clusters (a primary with a streaming replica for `database.read_url`).
pub use hookgate_pgcluster as pgcluster;
pub mod brokers;
pub mod console;
pub mod fake_providers;
pub mod github_app;
pub mod postgres;
pub mod proxy;
pub mod raw;
pub mod signing;
pub mod sink;

use actix_web::dev::ServerHandle;
use hookgate::config::Settings;
use hookgate::startup::Application;
use hookgate::store::Store;

/// Runs an async test body once per backend: `both_backends!(test_fn, ...)` defines
/// `sqlite::test_fn` and `postgres::test_fn`, each calling `test_fn(Backend::X)`.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Backend::Postgres).await
                }
            )*
        }
    };
}

/// `both_backends!` for synchronous tests (those that drive the binary as a process):
/// `both_stores!(test_fn, ...)` defines `sqlite::test_fn` and `postgres::test_fn`, each calling
/// `test_fn(Backend::X)`.
#[macro_export]
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::$name($crate::Backend::Sqlite) } )*
        }
        mod postgres {
            $( #[test] fn $name() { super::$name($crate::Backend::Postgres) } )*
        }
    };
}

/// A fresh database of `backend` for a test that runs the binary: a file in `dir`, or a
/// PostgreSQL database dropped with the returned guard (which must outlive the processes that
/// use it); and its URL.
pub fn database_for_processes(
    backend: Backend,
    dir: &std::path::Path,
) -> (Option<postgres::TestDatabase>, String) {
    match backend {
        Backend::Sqlite => (
            None,
            format!("sqlite://{}", dir.join("hookgate.db").display()),
        ),
        Backend::Postgres => {
            let db = tokio::runtime::Runtime::new()
                .expect("a runtime")
                .block_on(postgres::TestDatabase::create());
            let url = db.url().to_owned();
            (Some(db), url)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub const STRIPE_SECRET: &str = "whsec_current_stripe_secret";
pub const STRIPE_OLD_SECRET: &str = "whsec_previous_stripe_secret";
pub const GITHUB_SECRET: &str = "It's a Secret to Everybody";
pub const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
pub const SVIX_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const MAX_BODY: usize = 4096;
/// Admin tokens of the two tenants: `acme` owns the stripe source, `default` the others.
pub const ACME_TOKEN: &str = "hg_acme_test_token_0123456789abcdefghijklmnopq";
pub const DEFAULT_TOKEN: &str = "hg_default_test_token_0123456789abcdefghijklmn";

fn sha256_hex(s: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(s.as_bytes()))
}

/// The configuration every test starts from; tests adjust it through `spawn_app_with`.
pub fn base_config() -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
max_body_bytes = {MAX_BODY}
retry_after_seconds = 7

[database]
url = "sqlite::memory:"
acquire_timeout = "2s"
busy_timeout = "2s"

[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{STRIPE_SECRET}", "{STRIPE_OLD_SECRET}"]
tenant = "acme"
destinations = ["billing", "audit"]

[[sources]]
name = "github"
provider = "github"
secrets = ["{GITHUB_SECRET}"]
destinations = ["audit"]

[[sources]]
name = "slack"
provider = "slack"
secrets = ["{SLACK_SECRET}"]
destinations = ["audit"]

[[sources]]
name = "svix"
provider = "svix"
secrets = ["{SVIX_SECRET}"]
destinations = ["billing"]

[[admin.tokens]]
tenant = "acme"
token_sha256 = "{acme}"

[[admin.tokens]]
tenant = "default"
token_sha256 = "{default}"

[[destinations]]
name = "billing"
url = "http://127.0.0.1:9/billing"
signing_secret = "whsec_dGVzdC1iaWxsaW5nLXNpZ25pbmcta2V5"

[[destinations]]
name = "audit"
url = "http://127.0.0.1:9/audit"
signing_secret = "whsec_dGVzdC1hdWRpdC1zaWduaW5nLWtleQ=="
"#,
        acme = sha256_hex(ACME_TOKEN),
        default = sha256_hex(DEFAULT_TOKEN),
    )
}

/// Held only to be dropped with the app: the SQLite file's directory, or the PostgreSQL
/// database, goes away then.
#[allow(dead_code)]
enum DbGuard {
    Sqlite(tempfile::TempDir),
    Postgres(postgres::TestDatabase),
}

pub struct TestApp {
    pub address: String,
    pub store: Store,
    pub client: reqwest::Client,
    pub backend: Backend,
    /// The URL the gateway was configured with (after any rewrite by the test).
    pub database_url: String,
    pub config: std::sync::Arc<hookgate::config::GatewayConfig>,
    pub admin_pause: hookgate::admin::SharedPause,
    pub batcher: hookgate::ingest::IngestBatcher,
    pub metrics: std::sync::Arc<hookgate::telemetry::Metrics>,
    /// Where rejected requests go; `flush` waits for them to be written.
    pub quarantine: hookgate::quarantine::Quarantine,
    /// `http://127.0.0.1:{port}` of `[metrics] listen`, when set.
    pub metrics_address: Option<String>,
    handle: ServerHandle,
    /// The settings the app was built with, for `restart`.
    settings: Settings,
    // Dropped last: the database outlives the server using it. Moved on by `restart`.
    _db: Option<DbGuard>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        stop_server(self.handle.clone());
    }
}

/// Stops an actix server from a `Drop`: stopping is async and the test's runtime may be
/// shutting down, so it runs on a thread of its own, best effort.
pub fn stop_server(handle: ServerHandle) {
    let _ = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(handle.stop(false));
        }
    })
    .join();
}

pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, |_, url| url.to_owned()).await
}

/// `adjust` may edit the settings and returns the database URL the gateway should use,
/// given the real one (the outage tests route it through a proxy).
pub async fn spawn_app_with(
    backend: Backend,
    adjust: impl FnOnce(&mut Settings, &str) -> String,
) -> TestApp {
    let (guard, real_url) = match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite://{}", dir.path().join("hookgate.db").display());
            (DbGuard::Sqlite(dir), url)
        }
        Backend::Postgres => {
            let db = postgres::TestDatabase::create().await;
            let url = db.url().to_owned();
            (DbGuard::Postgres(db), url)
        }
    };
    let mut settings = Settings::from_toml_str(&base_config()).expect("base test config");
    let url = adjust(&mut settings, &real_url);
    settings.database.url = url;
    build(backend, settings, guard).await
}

/// Starts an app with `settings` (the database URL already set), keeping `guard`.
async fn build(backend: Backend, settings: Settings, guard: DbGuard) -> TestApp {
    let app = Application::build(settings.clone())
        .await
        .expect("the application builds");
    let address = format!("http://127.0.0.1:{}", app.port());
    let store = app.store().clone();
    let config = app.config().clone();
    let admin_pause = app.admin_pause().clone();
    let batcher = app.batcher().clone();
    let metrics = app.metrics().clone();
    let quarantine = app.quarantine().clone();
    let metrics_address = app.metrics_port().map(|p| format!("http://127.0.0.1:{p}"));
    let handle = app.handle();
    tokio::spawn(app.run_until_stopped());
    TestApp {
        address,
        store,
        client: reqwest::Client::new(),
        backend,
        database_url: settings.database.url.clone(),
        config,
        admin_pause,
        batcher,
        metrics,
        quarantine,
        metrics_address,
        handle,
        settings,
        _db: Some(guard),
    }
}

impl TestApp {
    /// Stops the server and starts a new one on the same database and settings, as a
    /// process restart would: nothing in memory survives, only what the database holds.
    pub async fn restart(self) -> TestApp {
        self.restart_with(|_| {}).await
    }

    /// As `restart`, with the settings changed by `adjust` first (a configuration update).
    pub async fn restart_with(mut self, adjust: impl FnOnce(&mut Settings)) -> TestApp {
        adjust(&mut self.settings);
        self.handle.stop(true).await;
        self.store.close().await;
        let guard = self._db.take().expect("a running app has its database");
        let (backend, settings) = (self.backend, self.settings.clone());
        drop(self);
        build(backend, settings, guard).await
    }
}

/// An app whose destinations `billing` and `audit` POST to `sink` at `/billing` and `/audit`.
pub async fn spawn_app_with_sink(
    backend: Backend,
    sink: &sink::Sink,
    adjust: impl FnOnce(&mut Settings),
) -> TestApp {
    let (billing, audit) = (sink.url("/billing"), sink.url("/audit"));
    spawn_app_with(backend, move |settings, url| {
        for d in &mut settings.destinations {
            d.url = if d.name == "billing" {
                billing.clone()
            } else {
                audit.clone()
            };
        }
        adjust(settings);
        url.to_owned()
    })
    .await
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    /// POSTs `body` to `/webhooks/{source}` with the given headers.
    pub async fn post_webhook(
        &self,
        source: &str,
        headers: &[(String, String)],
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        let mut req = self.client.post(self.url(&format!("/webhooks/{source}")));
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req.body(body).send().await.expect("request is sent")
    }

    /// An admin request with `token` (none when empty) and an optional Idempotency-Key.
    pub async fn admin(
        &self,
        method: reqwest::Method,
        token: &str,
        path: &str,
        body: Option<&str>,
        key: Option<&str>,
    ) -> reqwest::Response {
        let mut req = self
            .client
            .request(method, self.url(&format!("/admin/v1{path}")));
        if !token.is_empty() {
            req = req.bearer_auth(token);
        }
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        if let Some(b) = body {
            req = req
                .header("Content-Type", "application/json")
                .body(b.to_owned());
        }
        req.send().await.expect("admin request is sent")
    }

    /// GET as `token`, expecting 200 and JSON.
    pub async fn admin_json(&self, token: &str, path: &str) -> serde_json::Value {
        let r = self
            .admin(reqwest::Method::GET, token, path, None, None)
            .await;
        assert_eq!(r.status(), 200, "GET {path}");
        r.json().await.unwrap()
    }

    /// A worker counting into this app's metrics.
    pub fn worker(&self) -> hookgate::worker::Worker {
        hookgate::worker::Worker::new(self.store.clone(), self.config.clone())
            .with_metrics(self.metrics.clone())
    }

    /// Runs a worker's loop in a task of its own until `RunningWorker::stop`.
    pub fn start_worker(&self) -> RunningWorker {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let worker = std::sync::Arc::new(self.worker());
        let waiting = worker.waiting();
        let task = tokio::spawn(worker.run(stopped));
        RunningWorker {
            stop,
            task,
            waiting,
        }
    }

    pub fn reconciler(&self) -> hookgate::worker::Reconciler {
        hookgate::worker::Reconciler::new(self.store.clone(), self.config.clone())
            .with_metrics(self.metrics.clone())
    }

    /// Posts a Stripe event and returns its hookgate id.
    pub async fn ingest_stripe(&self, provider_event_id: &str) -> hookgate::domain::EventId {
        let body = format!(r#"{{"id":"{provider_event_id}","type":"invoice.paid"}}"#);
        let r = self.post_stripe(&body).await;
        assert_eq!(r.status(), 200);
        let json: serde_json::Value = r.json().await.unwrap();
        hookgate::domain::EventId::parse(json["id"].as_str().unwrap()).unwrap()
    }

    /// Posts a Standard Webhooks event to the `svix` source (one route: `billing`) and
    /// returns its hookgate id.
    pub async fn ingest_svix(&self, webhook_id: &str) -> hookgate::domain::EventId {
        let body = r#"{"type":"user.created"}"#;
        let headers =
            signing::svix_headers(SVIX_SECRET, webhook_id, signing::now(), body.as_bytes());
        let r = self.post_webhook("svix", &headers, body).await;
        assert_eq!(r.status(), 200);
        let json: serde_json::Value = r.json().await.unwrap();
        hookgate::domain::EventId::parse(json["id"].as_str().unwrap()).unwrap()
    }

    /// Posts `count` Stripe events, `{prefix}_0`, `{prefix}_1`, ... one after another, and
    /// returns their hookgate ids in that order.
    pub async fn ingest_stripes(
        &self,
        prefix: &str,
        count: usize,
    ) -> Vec<hookgate::domain::EventId> {
        let mut ids = Vec::with_capacity(count);
        for i in 0..count {
            ids.push(self.ingest_stripe(&format!("{prefix}_{i}")).await);
        }
        ids
    }

    /// The job of `event` for `destination`.
    pub async fn job(
        &self,
        event: hookgate::domain::EventId,
        destination: &str,
    ) -> hookgate::store::StoredJob {
        self.store
            .jobs_for_event(event)
            .await
            .unwrap()
            .into_iter()
            .find(|j| j.destination == destination)
            .unwrap_or_else(|| panic!("no {destination} job for {event}"))
    }

    /// A Stripe event signed now with the current secret.
    pub async fn post_stripe(&self, body: &str) -> reqwest::Response {
        let headers = signing::stripe_headers(STRIPE_SECRET, signing::now(), body.as_bytes());
        self.post_webhook("stripe", &headers, body.to_owned()).await
    }
}

pub async fn error_code(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: serde_json::Value = response.json().await.expect("error body is JSON");
    let code = body["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error.code in {body}"))
        .to_owned();
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "no error.message in {body}"
    );
    (status, code)
}

/// An event as the store receives it, received now from a Stripe source with no jobs;
/// a test changes what it cares about with `NewEvent { field, ..new_event(...) }`.
pub fn new_event<'a>(
    tenant: &'a hookgate::domain::Name,
    source: &'a hookgate::domain::Name,
    provider_event_id: &'a hookgate::domain::ProviderEventId,
    body: &'a [u8],
) -> hookgate::store::NewEvent<'a> {
    hookgate::store::NewEvent {
        id: hookgate::domain::EventId::generate(),
        tenant,
        source,
        provider_event_id,
        event_type: None,
        received_at: chrono::Utc::now(),
        content_type: None,
        headers_json: "[]".into(),
        body,
        verified_scheme: "stripe",
        verified_secret_index: 0,
        destinations: &[],
        delays: &[],
        route_digest: None,
        claims: &[],
        orderings: &[],
    }
}

/// A worker loop started by `TestApp::start_worker`.
pub struct RunningWorker {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    waiting: tokio::sync::watch::Receiver<bool>,
}

impl RunningWorker {
    /// Returns once the loop is waiting for a wake-up: only a wake-up (or its poll
    /// interval) makes it claim again.
    pub async fn waiting(&mut self) {
        self.waiting
            .wait_for(|w| *w)
            .await
            .expect("the worker loop runs");
    }

    /// Asks the loop to shut down and waits until it has (in-flight deliveries finished or
    /// handed back).
    pub async fn stop(self) {
        self.stop.send(true).unwrap();
        self.task.await.unwrap();
    }
}
