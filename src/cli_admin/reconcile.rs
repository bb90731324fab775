//! `hookgate reconcile --source NAME [--since TIME]`: one reconciliation of a source against
//! its provider's API, now, through the admin API; prints what the run listed, found missing
//! and recovered.

use chrono::{DateTime, Utc};
use clap::Args;
use serde::Deserialize;

use super::client::{self, Api};
use super::{render, rfc3339, time, ApiArgs};

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    /// The source to reconcile (it needs `[sources.reconcile]`).
    #[arg(long)]
    pub source: String,
    /// Start a new pass from this time (RFC 3339, within the source's lookback); without it
    /// the run goes on from where the last one stopped, or covers the whole lookback.
    #[arg(long, value_parser = rfc3339)]
    pub since: Option<DateTime<Utc>>,
    /// Reuse the key of an earlier attempt so a repeated request acts once.
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Run {
    source: String,
    since: String,
    until: String,
    listed: i64,
    missing: i64,
    recovered: i64,
    errors: i64,
    last_error: Option<String>,
    cursor: Option<String>,
}

pub async fn reconcile(args: ReconcileArgs) -> anyhow::Result<()> {
    let client = Api::new(&args.api)?;
    let key = client::idempotency_key(args.idempotency_key.as_deref(), args.api.json)?;
    let body = args
        .since
        .map(|t| serde_json::to_vec(&serde_json::json!({"since": time(&t)})))
        .transpose()?;
    let reply = client
        .post(&["sources", &args.source, "reconciliations"], body, &key)
        .await?;
    if args.api.json {
        return render::emit(&reply.body);
    }
    let run: Run = client::parse(&reply.body)?;
    let mut text = format!(
        "source {}: {} listed from {} to {}, {} missing, {} recovered, {} error(s)\n",
        render::clean(&run.source),
        run.listed,
        render::clean(&run.since),
        render::clean(&run.until),
        run.missing,
        run.recovered,
        run.errors
    );
    if let Some(e) = &run.last_error {
        text.push_str(&format!("last error: {}\n", render::clean(e)));
    }
    if run.cursor.is_some() {
        text.push_str("not finished: the next run goes on from where this one stopped\n");
    }
    render::emit_text(&text)?;
    render::replayed_note(reply.replayed);
    Ok(())
}
