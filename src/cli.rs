//! The command line: `serve`, `migrate`, `check`.

use std::io::Write as _;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::{GatewayConfig, Settings};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use sha2::{Digest, Sha256};

use tokio::sync::watch;

use crate::startup::{shutdown_signal, Application, BackgroundWork, Role};
use crate::store::Store;
use crate::telemetry;

#[derive(Debug, Parser)]
#[command(name = "hookgate", version, about = "Webhook ingestion gateway")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply pending migrations, then serve the ingest API.
    Serve {
        #[arg(long, short, env = "HOOKGATE_CONFIG")]
        config: PathBuf,
        /// Run the HTTP server, the delivery workers, or both.
        #[arg(long, value_enum, default_value = "all")]
        role: Role,
        /// Log format; overrides `[log] format`.
        #[arg(long, value_enum)]
        log_format: Option<LogFormatArg>,
    },
    /// Apply pending migrations and exit.
    Migrate {
        #[arg(long, short, env = "HOOKGATE_CONFIG")]
        config: PathBuf,
    },
    /// Validate the configuration and provider definitions, then exit.
    Check {
        #[arg(long, short, env = "HOOKGATE_CONFIG")]
        config: PathBuf,
    },
    /// Admin tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Sign a test webhook as a source's provider would and post it to the gateway.
    Send(crate::cli_send::SendArgs),
    /// Receive hookgate's deliveries locally, verify their signatures and print them.
    Listen(crate::cli_listen::ListenArgs),
    /// Stored events, through a running gateway's admin API.
    #[command(subcommand)]
    Events(crate::cli_admin::EventsCommand),
    /// Replay one event, or every event matching a filter, through the admin API.
    Replay(crate::cli_admin::ReplayArgs),
    /// Dead letters (failed jobs), through the admin API.
    #[command(subcommand)]
    DeadLetters(crate::cli_admin::DeadLettersCommand),
    /// The tenant's sources and where each reads its event id, type and signature.
    Sources(crate::cli_admin::ApiArgs),
    /// The tenant's destinations, their state and queue; pause and resume one.
    #[command(subcommand)]
    Destinations(crate::cli_admin::DestinationsCommand),
    /// Requests that failed verification: list, show, verify again, discard.
    #[command(subcommand)]
    Quarantine(crate::cli_admin::QuarantineCommand),
    /// Reconcile a source against its provider's API now: recover what was never received.
    Reconcile(crate::cli_admin::ReconcileArgs),
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormatArg {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a fresh random admin token and the config lines that accept it.
    New {
        #[arg(long)]
        tenant: String,
    },
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve {
            config,
            role,
            log_format,
        } => serve(&config, role, log_format).await?,
        Command::Events(command) => crate::cli_admin::events(command).await?,
        Command::Replay(args) => crate::cli_admin::replay(args).await?,
        Command::DeadLetters(command) => crate::cli_admin::dead_letters(command).await?,
        Command::Sources(api) => crate::cli_admin::sources(api).await?,
        Command::Destinations(command) => crate::cli_admin::destinations(command).await?,
        Command::Quarantine(command) => crate::cli_admin::quarantine(command).await?,
        Command::Reconcile(args) => crate::cli_admin::reconcile(args).await?,
        Command::Migrate { config } => {
            let settings = Settings::load(&config)?;
            let gateway = GatewayConfig::from_settings(&settings)?;
            telemetry::init(gateway.log_format);
            let store = Store::connect(&gateway.database)?;
            store.migrate().await?;
            if telemetry::json_output() {
                let fields = serde_json::json!({"message": "migrations applied", "store": store.backend_name()});
                println!("{}", telemetry::json_line("INFO", fields));
            } else {
                println!("migrations applied ({})", store.backend_name());
            }
        }
        Command::Send(args) => crate::cli_send::send(args).await?,
        Command::Listen(args) => crate::cli_listen::listen(args).await?,
        Command::Token(TokenCommand::New { tenant }) => {
            crate::domain::Name::parse("tenant", &tenant)?;
            let mut bytes = [0u8; 32];
            getrandom::getrandom(&mut bytes)
                .map_err(|e| anyhow::anyhow!("no randomness from the OS: {e}"))?;
            let token = format!("hg_{}", URL_SAFE_NO_PAD.encode(bytes));
            let digest = hex::encode(Sha256::digest(token.as_bytes()));
            println!("token: {token}");
            println!("# Keep the token secret; put only its digest in the configuration:");
            println!("[[admin.tokens]]\ntenant = \"{tenant}\"\ntoken_sha256 = \"{digest}\"");
        }
        Command::Check { config } => {
            let settings = Settings::load(&config)?;
            let gateway = GatewayConfig::from_settings(&settings)?;
            println!(
                "configuration OK: {} source(s), {} destination(s)",
                gateway.sources.len(),
                gateway.destinations.len()
            );
        }
    }
    Ok(())
}

fn display_address(listen: &str, port: u16) -> String {
    match listen.rsplit_once(':') {
        Some((host, _)) => format!("{host}:{port}"),
        None => format!("{listen}:{port}"),
    }
}

/// Where the gateway listens and where to POST each source's webhooks: plain lines, or JSON
/// lines in JSON mode (then every line the process prints is JSON).
fn print_banner(
    base: &str,
    metrics_base: Option<&str>,
    store: &str,
    role: Role,
    gateway: &GatewayConfig,
) {
    let json = telemetry::json_output();
    let mut lines = vec![if json {
        telemetry::json_line(
            "INFO",
            serde_json::json!({"message": "hookgate listening", "url": base, "store": store, "role": format!("{role:?}")}),
        )
    } else {
        format!("hookgate listening on {base} (store: {store}, role: {role:?})")
    }];
    if role != Role::Worker {
        for name in gateway.sources.keys() {
            let url = format!("{base}/webhooks/{name}");
            lines.push(if json {
                telemetry::json_line(
                    "INFO",
                    serde_json::json!({"message": "ingest URL", "source": name, "url": url}),
                )
            } else {
                format!("  POST webhooks for source {name:?} to {url}")
            });
        }
    }
    let metrics_url = format!("{}/metrics", metrics_base.unwrap_or(base));
    let token = gateway.metrics.token_sha256.is_some();
    lines.push(if json {
        telemetry::json_line(
            "INFO",
            serde_json::json!({"message": "metrics URL", "url": metrics_url, "bearer_token": token}),
        )
    } else {
        let needs = if token { " (bearer token required)" } else { "" };
        format!("  metrics at {metrics_url}{needs}")
    });
    // A closed stdout (a supervisor that stopped reading) must not stop the gateway.
    let mut out = std::io::stdout().lock();
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

async fn serve(
    config: &std::path::Path,
    role: Role,
    log_format: Option<LogFormatArg>,
) -> anyhow::Result<()> {
    // The flag applies before the configuration loads, so its errors come out in its format.
    if let Some(format) = log_format {
        telemetry::init(match format {
            LogFormatArg::Json => crate::config::LogFormat::Json,
            LogFormatArg::Text => crate::config::LogFormat::Text,
        });
    }
    let settings = Settings::load(config)?;
    let gateway = GatewayConfig::from_settings(&settings)?;
    telemetry::init(gateway.log_format);
    let (stop, stopped) = watch::channel(false);

    let app = Application::build_with_role(settings, role).await?;
    let base = format!(
        "http://{}",
        display_address(&gateway.server.listen, app.port())
    );
    let metrics_base = app.metrics_port().map(|port| {
        let listen = gateway.metrics.listen.as_deref().unwrap_or_default();
        format!("http://{}", display_address(listen, port))
    });
    print_banner(
        &base,
        metrics_base.as_deref(),
        app.store().backend_name(),
        role,
        &gateway,
    );
    let (store, config, metrics) = (
        app.store().clone(),
        app.config().clone(),
        app.metrics().clone(),
    );
    let handoff = role == Role::All && config.worker.handoff;
    // Reconciliation against providers' APIs runs where the other background work does.
    let reconciliation = (role != Role::Api).then(|| {
        tokio::spawn(
            app.provider_reconciler()
                .clone()
                .run_on_schedule(stopped.clone()),
        )
    });
    let background = (role != Role::Api).then(|| {
        let work = BackgroundWork::new(store.clone(), config, metrics);
        if handoff {
            app.batcher().hand_off_to(work.handoff());
        }
        tokio::spawn(work.run(stopped))
    });
    let server = Some(app);
    let server_handle = server.as_ref().map(Application::handle);
    let server_task = server.map(|app| tokio::spawn(app.run_until_stopped()));

    shutdown_signal().await;
    tracing::info!("shutting down: no new work; finishing what is in flight");
    let _ = stop.send(true);
    if let Some(handle) = server_handle {
        handle.stop(true).await;
    }
    if let Some(task) = server_task {
        task.await??;
    }
    if let Some(task) = background {
        task.await?;
    }
    if let Some(task) = reconciliation {
        task.await?;
    }
    store.close().await;
    Ok(())
}
