//! `hookgate destinations`: list the tenant's destinations with their state and queue, and
//! pause or resume one, through the admin API.

use clap::Subcommand;
use serde::Deserialize;

use super::client::{self, Api};
use super::{render, ApiArgs};

#[derive(Debug, Subcommand)]
pub enum DestinationsCommand {
    /// Each destination the tenant's sources route to: state, jobs due, oldest due age,
    /// last hour's success rate and failure streak.
    List {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Hold a destination's jobs (in every process, until resumed); nothing is dropped.
    Pause {
        #[command(flatten)]
        api: ApiArgs,
        name: String,
        /// Reuse the key of an earlier attempt so a repeated request acts once.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Deliver a paused destination's held jobs again, oldest first.
    Resume {
        #[command(flatten)]
        api: ApiArgs,
        name: String,
        /// Reuse the key of an earlier attempt so a repeated request acts once.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
}

#[derive(Debug, Deserialize)]
pub struct Destination {
    pub name: String,
    pub state: String,
    pub jobs_due: i64,
    pub oldest_due_age_seconds: Option<i64>,
    pub recent_attempts: i64,
    pub recent_success_rate: Option<f64>,
    pub failure_streak: i64,
}

/// The destinations as a table.
pub fn destinations_table(rows: &[Destination]) -> String {
    if rows.is_empty() {
        return "no destinations\n".into();
    }
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|d| {
            vec![
                render::clean(&d.name),
                render::clean(&d.state),
                d.jobs_due.to_string(),
                d.oldest_due_age_seconds
                    .map_or("-".into(), |s| format!("{s}s")),
                d.recent_attempts.to_string(),
                d.recent_success_rate
                    .map_or("-".into(), |r| format!("{:.1}%", r * 100.0)),
                d.failure_streak.to_string(),
            ]
        })
        .collect();
    render::table(
        &[
            "NAME",
            "STATE",
            "DUE",
            "OLDEST DUE",
            "ATTEMPTS (1H)",
            "SUCCESS (1H)",
            "FAILURE STREAK",
        ],
        &rows,
        "",
    )
}

pub async fn destinations(command: DestinationsCommand) -> anyhow::Result<()> {
    let (api, name, key, action) = match command {
        DestinationsCommand::List { api } => {
            let client = Api::new(&api)?;
            let body = client.get(&["destinations"], &[]).await?.body;
            if api.json {
                return render::emit(&body);
            }
            #[derive(Deserialize)]
            struct Destinations {
                data: Vec<Destination>,
            }
            let parsed: Destinations = client::parse(&body)?;
            return render::emit_text(&destinations_table(&parsed.data));
        }
        DestinationsCommand::Pause {
            api,
            name,
            idempotency_key,
        } => (api, name, idempotency_key, "pause"),
        DestinationsCommand::Resume {
            api,
            name,
            idempotency_key,
        } => (api, name, idempotency_key, "resume"),
    };
    let client = Api::new(&api)?;
    let key = client::idempotency_key(key.as_deref(), api.json)?;
    let reply = client
        .post(&["destinations", &name, action], None, &key)
        .await?;
    if api.json {
        return render::emit(&reply.body);
    }
    let d: Destination = client::parse(&reply.body)?;
    render::emit_text(&format!(
        "destination {} is {}; {} job(s) due\n",
        render::clean(&d.name),
        render::clean(&d.state),
        d.jobs_due
    ))?;
    render::replayed_note(reply.replayed);
    Ok(())
}
