//! The command line: `serve`, `migrate`, `check`.

use std::io::Write as _;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::{GatewayConfig, Settings};
use crate::startup::Application;
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
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { config } => {
            let settings = Settings::load(&config)?;
            let gateway = GatewayConfig::from_settings(&settings)?;
            telemetry::init(gateway.log_format);
            let app = Application::build(settings).await?;
            let base = format!(
                "http://{}",
                display_address(&gateway.server.listen, app.port())
            );
            // A closed stdout (a supervisor that stopped reading) must not stop the gateway.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "hookgate listening on {base} (store: {})",
                app.store().backend_name()
            );
            for name in gateway.sources.keys() {
                let _ = writeln!(
                    out,
                    "  POST webhooks for source {name:?} to {base}/webhooks/{name}"
                );
            }
            let _ = out.flush();
            drop(out);
            app.run_until_stopped().await?;
        }
        Command::Migrate { config } => {
            let settings = Settings::load(&config)?;
            let gateway = GatewayConfig::from_settings(&settings)?;
            telemetry::init(gateway.log_format);
            let store = Store::connect(&gateway.database)?;
            store.migrate().await?;
            println!("migrations applied ({})", store.backend_name());
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
