//! `hookgate events|replay|dead-letters|sources|destinations|quarantine|reconcile`: operator commands that call the admin API of a
//! running gateway. They go through the API rather than the database because the API is the
//! one place that enforces tenant scoping, Idempotency-Key and validation, and because it
//! works against a remote deployment without handing out database credentials.

mod client;
mod destinations;
mod quarantine;
mod reconcile;
mod render;

pub use destinations::{destinations, DestinationsCommand};
pub use quarantine::{quarantine, QuarantineCommand};
pub use reconcile::{reconcile, ReconcileArgs};

use anyhow::Context as _;
use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Map, Value};

use client::Api;
use render::{DeadLetter, DryRunReply, EventDetail, EventSummary, Job, Page, Source};

/// Where the gateway is and who is asking; shared by every admin command.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// Base URL of a running gateway (its `server.listen` address).
    #[arg(long, env = "HOOKGATE_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Admin bearer token (`hookgate token new` makes one).
    #[arg(long, env = "HOOKGATE_ADMIN_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Print the API's JSON response instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Event filters, shared by `events list` and bulk `replay` as the API shares them.
#[derive(Debug, Clone, Args)]
pub struct EventFilterArgs {
    /// Events received by this source.
    #[arg(long)]
    pub source: Option<String>,
    /// Events of this type (e.g. invoice.paid).
    #[arg(long)]
    pub event_type: Option<String>,
    /// The provider's own event id.
    #[arg(long)]
    pub provider_event_id: Option<String>,
    /// Events with at least one job in this status, or `no_route`: events without a job.
    #[arg(long, value_parser = ["pending", "in_progress", "succeeded", "failed", "no_route"])]
    pub status: Option<String>,
    /// RFC 3339, inclusive.
    #[arg(long, value_parser = rfc3339)]
    pub received_from: Option<DateTime<Utc>>,
    /// RFC 3339, exclusive.
    #[arg(long, value_parser = rfc3339)]
    pub received_to: Option<DateTime<Utc>>,
}

/// Dead-letter filters, shared by `dead-letters list` and bulk `dead-letters retry`.
#[derive(Debug, Clone, Args)]
pub struct DeadLetterFilterArgs {
    /// Jobs for this destination.
    #[arg(long)]
    pub destination: Option<String>,
    /// Jobs for events received by this source.
    #[arg(long)]
    pub source: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct PageArgs {
    /// Rows per page (1 to 500; the API's default is 50).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=500))]
    pub limit: Option<u16>,
    /// Start after this position (the `next_cursor` of an earlier page).
    #[arg(long)]
    pub cursor: Option<String>,
    /// Follow `next_cursor` until the last page.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// List stored events, newest first.
    List {
        #[command(flatten)]
        api: ApiArgs,
        #[command(flatten)]
        filter: EventFilterArgs,
        #[command(flatten)]
        page: PageArgs,
    },
    /// Show one event: headers, body, and its delivery jobs with every attempt.
    Show {
        #[command(flatten)]
        api: ApiArgs,
        /// hookgate event id.
        id: String,
        /// Write the exact stored body bytes to stdout and nothing else.
        #[arg(long, conflicts_with = "json")]
        raw: bool,
    },
}

/// Replay one event (by ID) or every event matching a filter (no ID).
#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    /// hookgate event id; without it, the filters select the events (at least one is needed).
    #[arg(
        conflicts_with = "EventFilterArgs",
        required_unless_present = "EventFilterArgs"
    )]
    pub id: Option<String>,
    /// Replay to this destination only (repeatable; default: all of the source's).
    #[arg(
        long = "destination",
        value_name = "DESTINATION",
        conflicts_with = "EventFilterArgs"
    )]
    pub destinations: Vec<String>,
    #[command(flatten)]
    pub filter: EventFilterArgs,
    /// Only count the events a bulk replay would replay.
    #[arg(long, conflicts_with = "id")]
    pub dry_run: bool,
    /// Reuse the key of an earlier attempt so a repeated request acts once.
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum DeadLettersCommand {
    /// List failed jobs that have not been discarded, most recently failed first.
    List {
        #[command(flatten)]
        api: ApiArgs,
        #[command(flatten)]
        filter: DeadLetterFilterArgs,
        #[command(flatten)]
        page: PageArgs,
    },
    /// Queue a dead letter (by job ID) or every one matching a filter again.
    Retry {
        #[command(flatten)]
        api: ApiArgs,
        /// Job id; without it, --destination and/or --source select the dead letters.
        #[arg(
            conflicts_with = "DeadLetterFilterArgs",
            required_unless_present = "DeadLetterFilterArgs"
        )]
        job_id: Option<String>,
        #[command(flatten)]
        filter: DeadLetterFilterArgs,
        /// Reuse the key of an earlier attempt so a repeated request acts once.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Discard a dead letter: it stays in the event's history but leaves the list.
    Discard {
        #[command(flatten)]
        api: ApiArgs,
        job_id: String,
    },
}

fn rfc3339(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("{e} (expected RFC 3339, e.g. 2024-05-01T12:00:00Z)"))
}

fn time(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

impl EventFilterArgs {
    /// `(name, value)` pairs named as the API names them, for a query or a JSON body.
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let text = [
            ("source", &self.source),
            ("event_type", &self.event_type),
            ("provider_event_id", &self.provider_event_id),
            ("status", &self.status),
        ];
        for (name, value) in text {
            if let Some(v) = value {
                out.push((name, v.clone()));
            }
        }
        if let Some(t) = &self.received_from {
            out.push(("received_from", time(t)));
        }
        if let Some(t) = &self.received_to {
            out.push(("received_to", time(t)));
        }
        out
    }
}

impl DeadLetterFilterArgs {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        [("destination", &self.destination), ("source", &self.source)]
            .into_iter()
            .filter_map(|(name, v)| v.clone().map(|v| (name, v)))
            .collect()
    }
}

/// serde_json's map is sorted, so the same flags always give the same bytes: a repeat with the
/// same Idempotency-Key must send an identical body or the API refuses it as a reuse.
fn to_json_object(pairs: Vec<(&'static str, String)>) -> Map<String, Value> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::String(v)))
        .collect()
}

/// Fetches one page, or every page with `--all`, as the API's JSON page shape.
async fn pages<T: serde::de::DeserializeOwned>(
    api: &Api,
    path: &[&str],
    mut query: Vec<(&'static str, String)>,
    page: &PageArgs,
) -> anyhow::Result<(Vec<u8>, Page<T>)> {
    if let Some(limit) = page.limit {
        query.push(("limit", limit.to_string()));
    }
    let mut cursor = page.cursor.clone();
    let mut all: Vec<Value> = Vec::new();
    loop {
        let mut q = query.clone();
        if let Some(c) = &cursor {
            q.push(("cursor", c.clone()));
        }
        let body = api.get(path, &q).await?.body;
        if !page.all {
            let parsed = client::parse(&body)?;
            return Ok((body.to_vec(), parsed));
        }
        let parsed: Page<Value> = client::parse(&body)?;
        all.extend(parsed.data);
        match parsed.next_cursor {
            // A server that hands back the cursor it was given would loop forever.
            Some(next) if cursor.as_deref() == Some(next.as_str()) => {
                anyhow::bail!("the API returned the same cursor twice; stopping")
            }
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let merged = json!({ "data": all, "next_cursor": null });
    let parsed = serde_json::from_value(merged.clone()).context("unexpected API response")?;
    Ok((serde_json::to_vec(&merged)?, parsed))
}

pub async fn events(command: EventsCommand) -> anyhow::Result<()> {
    match command {
        EventsCommand::List { api, filter, page } => {
            let client = Api::new(&api)?;
            let (body, parsed) =
                pages::<EventSummary>(&client, &["events"], filter.pairs(), &page).await?;
            if api.json {
                return render::emit(&body);
            }
            render::emit_text(&render::events_table(&parsed.data))?;
            render::more_hint("events", parsed.next_cursor.as_deref());
        }
        EventsCommand::Show { api, id, raw } => {
            let client = Api::new(&api)?;
            if raw {
                let body = client.get(&["events", &id, "raw"], &[]).await?.body;
                return render::emit_bytes(&body);
            }
            let body = client.get(&["events", &id], &[]).await?.body;
            if api.json {
                return render::emit(&body);
            }
            let event: EventDetail = client::parse(&body)?;
            render::emit_text(&render::event_detail(&event))?;
        }
    }
    Ok(())
}

pub async fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let client = Api::new(&args.api)?;
    let key = client::idempotency_key(args.idempotency_key.as_deref(), args.api.json)?;
    if let Some(id) = &args.id {
        // An empty body means "every destination"; sending only what was asked keeps a
        // repeat with the same key byte-identical, which the API requires.
        let body = (!args.destinations.is_empty())
            .then(|| serde_json::to_vec(&json!({ "destinations": args.destinations })))
            .transpose()?;
        let reply = client.post(&["events", id, "replay"], body, &key).await?;
        if args.api.json {
            return render::emit(&reply.body);
        }
        #[derive(serde::Deserialize)]
        struct Jobs {
            jobs: Vec<Job>,
        }
        let jobs: Jobs = client::parse(&reply.body)?;
        let mut text = format!("queued {} job(s) for event {}\n", jobs.jobs.len(), id);
        text.push_str(&render::jobs_table(&jobs.jobs, ""));
        render::emit_text(&text)?;
        render::replayed_note(reply.replayed);
        return Ok(());
    }
    let mut body = to_json_object(args.filter.pairs());
    if args.dry_run {
        body.insert("dry_run".into(), Value::Bool(true));
    }
    let reply = client
        .post(&["replay"], Some(serde_json::to_vec(&body)?), &key)
        .await?;
    if args.api.json {
        return render::emit(&reply.body);
    }
    let text = if args.dry_run {
        let dry: DryRunReply = client::parse(&reply.body)?;
        format!(
            "dry run: {} event(s) match; nothing was replayed\n",
            dry.matched
        )
    } else {
        #[derive(serde::Deserialize)]
        struct Replayed {
            replayed: i64,
        }
        let r: Replayed = client::parse(&reply.body)?;
        format!("replayed {} event(s)\n", r.replayed)
    };
    render::emit_text(&text)?;
    render::replayed_note(reply.replayed);
    Ok(())
}

pub async fn dead_letters(command: DeadLettersCommand) -> anyhow::Result<()> {
    match command {
        DeadLettersCommand::List { api, filter, page } => {
            let client = Api::new(&api)?;
            let (body, parsed) =
                pages::<DeadLetter>(&client, &["dead-letters"], filter.pairs(), &page).await?;
            if api.json {
                return render::emit(&body);
            }
            render::emit_text(&render::dead_letters_table(&parsed.data))?;
            render::more_hint("dead letters", parsed.next_cursor.as_deref());
        }
        DeadLettersCommand::Retry {
            api,
            job_id,
            filter,
            idempotency_key,
        } => {
            let client = Api::new(&api)?;
            let key = client::idempotency_key(idempotency_key.as_deref(), api.json)?;
            let reply = match &job_id {
                Some(id) => {
                    client
                        .post(&["dead-letters", id, "retry"], None, &key)
                        .await?
                }
                None => {
                    let body = serde_json::to_vec(&to_json_object(filter.pairs()))?;
                    client
                        .post(&["dead-letters", "retry"], Some(body), &key)
                        .await?
                }
            };
            if api.json {
                return render::emit(&reply.body);
            }
            let text = if job_id.is_some() {
                let job: Job = client::parse(&reply.body)?;
                format!(
                    "job {} ({}) is {} again; next attempt at {}\n",
                    render::clean(&job.id),
                    render::clean(&job.destination),
                    render::clean(&job.status),
                    render::short_time(&job.next_attempt_at)
                )
            } else {
                #[derive(serde::Deserialize)]
                struct Retried {
                    retried: i64,
                }
                let r: Retried = client::parse(&reply.body)?;
                format!("retried {} dead letter(s)\n", r.retried)
            };
            render::emit_text(&text)?;
            render::replayed_note(reply.replayed);
        }
        DeadLettersCommand::Discard { api, job_id } => {
            let client = Api::new(&api)?;
            let body = client
                .send(Method::DELETE, &["dead-letters", &job_id], &[], None, None)
                .await?
                .body;
            if api.json {
                return render::emit(&body);
            }
            let job: Job = client::parse(&body)?;
            render::emit_text(&format!(
                "discarded job {} ({}); it stays in event {}'s history\n",
                render::clean(&job.id),
                render::clean(&job.destination),
                render::clean(&job.event_id)
            ))?;
        }
    }
    Ok(())
}

pub async fn sources(api: ApiArgs) -> anyhow::Result<()> {
    let client = Api::new(&api)?;
    let body = client.get(&["sources"], &[]).await?.body;
    if api.json {
        return render::emit(&body);
    }
    #[derive(serde::Deserialize)]
    struct Sources {
        data: Vec<Source>,
    }
    let parsed: Sources = client::parse(&body)?;
    render::emit_text(&render::sources_table(&parsed.data))
}
