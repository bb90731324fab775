//! `hookgate quarantine`: requests that failed verification, listed, shown, verified again
//! with the sources' current secrets, or discarded, through the admin API.

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use reqwest::Method;
use serde::Deserialize;

use super::client::{self, Api};
use super::{pages, render, rfc3339, time, to_json_object, ApiArgs, PageArgs};

/// The quarantine's filters, shared by `list` and `verify --all` as the API shares them.
#[derive(Debug, Clone, Args)]
pub struct QuarantineFilterArgs {
    /// Requests to this source.
    #[arg(long)]
    pub source: Option<String>,
    /// Requests refused for this reason (e.g. invalid_signature).
    #[arg(long)]
    pub reason: Option<String>,
    /// RFC 3339, inclusive.
    #[arg(long, value_parser = rfc3339)]
    pub since: Option<DateTime<Utc>>,
    /// RFC 3339, exclusive.
    #[arg(long, value_parser = rfc3339)]
    pub until: Option<DateTime<Utc>>,
}

impl QuarantineFilterArgs {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out: Vec<(&'static str, String)> =
            [("source", &self.source), ("reason", &self.reason)]
                .into_iter()
                .filter_map(|(name, v)| v.clone().map(|v| (name, v)))
                .collect();
        for (name, t) in [("since", &self.since), ("until", &self.until)] {
            if let Some(t) = t {
                out.push((name, time(t)));
            }
        }
        out
    }
}

#[derive(Debug, Subcommand)]
pub enum QuarantineCommand {
    /// Requests to the tenant's sources that failed verification, newest first.
    List {
        #[command(flatten)]
        api: ApiArgs,
        #[command(flatten)]
        filter: QuarantineFilterArgs,
        #[command(flatten)]
        page: PageArgs,
    },
    /// One request as received: headers (credentials redacted) and body.
    Show {
        #[command(flatten)]
        api: ApiArgs,
        id: String,
    },
    /// Verify one request again (or, with --all, every one matching the filters) with the
    /// source's current secrets and the time it arrived; what verifies is stored and
    /// delivered as if it had arrived then.
    Verify {
        #[command(flatten)]
        api: ApiArgs,
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Every request matching the filters (none: the whole quarantine).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        filter: QuarantineFilterArgs,
        /// Reuse the key of an earlier attempt so a repeated request acts once.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Drop one request from the quarantine.
    Discard {
        #[command(flatten)]
        api: ApiArgs,
        id: String,
    },
}

#[derive(Debug, Deserialize)]
pub struct Quarantined {
    pub id: String,
    pub source: String,
    pub received_at: String,
    pub reason: String,
    pub checks: i64,
    pub body_bytes: i64,
    pub message: String,
}

fn quarantine_table(rows: &[Quarantined]) -> String {
    if rows.is_empty() {
        return "the quarantine is empty\n".into();
    }
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|q| {
            vec![
                render::clean(&q.id),
                render::clean(&q.source),
                render::short_time(&q.received_at),
                render::clean(&q.reason),
                q.checks.to_string(),
                q.body_bytes.to_string(),
                render::clean(&q.message),
            ]
        })
        .collect();
    render::table(
        &[
            "ID", "SOURCE", "RECEIVED", "REASON", "CHECKS", "BYTES", "MESSAGE",
        ],
        &rows,
        "",
    )
}

#[derive(Debug, Deserialize)]
struct Detail {
    #[serde(flatten)]
    summary: Quarantined,
    method: String,
    query: String,
    headers: Vec<Header>,
    body: Option<String>,
    body_base64: String,
}

#[derive(Debug, Deserialize)]
struct Header {
    name: String,
    value: String,
}

fn detail(d: &Detail) -> String {
    let s = &d.summary;
    let mut out = format!(
        "request {}\nsource:   {}\nreceived: {}\nreason:   {} ({})\nchecks:   {}\nrequest:  {} ?{}\nheaders:\n",
        render::clean(&s.id),
        render::clean(&s.source),
        render::short_time(&s.received_at),
        render::clean(&s.reason),
        render::clean(&s.message),
        s.checks,
        render::clean(&d.method),
        render::clean(&d.query),
    );
    for h in &d.headers {
        out.push_str(&format!(
            "  {}: {}\n",
            render::clean(&h.name),
            render::clean(&h.value)
        ));
    }
    match &d.body {
        Some(text) => out.push_str(&format!(
            "body ({} bytes):\n{}\n",
            s.body_bytes,
            render::clean(text)
        )),
        None => out.push_str(&format!(
            "body ({} bytes, base64):\n{}\n",
            s.body_bytes, d.body_base64
        )),
    }
    out
}

pub async fn quarantine(command: QuarantineCommand) -> anyhow::Result<()> {
    match command {
        QuarantineCommand::List { api, filter, page } => {
            let client = Api::new(&api)?;
            let (body, parsed) =
                pages::<Quarantined>(&client, &["quarantine"], filter.pairs(), &page).await?;
            if api.json {
                return render::emit(&body);
            }
            render::emit_text(&quarantine_table(&parsed.data))?;
            render::more_hint("requests", parsed.next_cursor.as_deref());
        }
        QuarantineCommand::Show { api, id } => {
            let client = Api::new(&api)?;
            let body = client.get(&["quarantine", &id], &[]).await?.body;
            if api.json {
                return render::emit(&body);
            }
            render::emit_text(&detail(&client::parse(&body)?))?;
        }
        QuarantineCommand::Verify {
            api,
            id,
            all: _,
            filter,
            idempotency_key,
        } => {
            let client = Api::new(&api)?;
            let key = client::idempotency_key(idempotency_key.as_deref(), api.json)?;
            let reply = match &id {
                Some(id) => {
                    client
                        .post(&["quarantine", id, "verify"], None, &key)
                        .await?
                }
                None => {
                    let body = serde_json::to_vec(&to_json_object(filter.pairs()))?;
                    client
                        .post(&["quarantine", "verify"], Some(body), &key)
                        .await?
                }
            };
            if api.json {
                return render::emit(&reply.body);
            }
            let text = if id.is_some() {
                #[derive(Deserialize)]
                struct One {
                    outcome: String,
                    event_id: Option<String>,
                    reason: Option<String>,
                }
                let one: One = client::parse(&reply.body)?;
                match (one.outcome.as_str(), &one.event_id, &one.reason) {
                    ("rejected", _, Some(reason)) => {
                        format!("still refused ({}); it stays\n", render::clean(reason))
                    }
                    (outcome, Some(event), _) => format!(
                        "{} as event {}; it left the quarantine\n",
                        render::clean(outcome),
                        render::clean(event)
                    ),
                    (outcome, _, _) => {
                        format!("{}; it left the quarantine\n", render::clean(outcome))
                    }
                }
            } else {
                #[derive(Deserialize)]
                struct Bulk {
                    ingested: u64,
                    duplicate: u64,
                    handshake: u64,
                    rejected: u64,
                    skipped: u64,
                }
                let b: Bulk = client::parse(&reply.body)?;
                format!(
                    "ingested {}, already stored {}, handshakes dropped {}, still refused {}, \
                     skipped (source gone) {}\n",
                    b.ingested, b.duplicate, b.handshake, b.rejected, b.skipped
                )
            };
            render::emit_text(&text)?;
            render::replayed_note(reply.replayed);
        }
        QuarantineCommand::Discard { api, id } => {
            let client = Api::new(&api)?;
            let body = client
                .send(Method::DELETE, &["quarantine", &id], &[], None, None)
                .await?
                .body;
            if api.json {
                return render::emit(&body);
            }
            let q: Quarantined = client::parse(&body)?;
            render::emit_text(&format!(
                "discarded request {} to {}\n",
                render::clean(&q.id),
                render::clean(&q.source)
            ))?;
        }
    }
    Ok(())
}
