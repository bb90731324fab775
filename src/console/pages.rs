//! The console's HTML, server-rendered with maud (escaped by default). No JavaScript.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use crate::admin::sources::SourceView;
use crate::admin::views::{DeadLetterView, EventDetail, EventSummaryView, JobView};

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#1d2733;background:#f6f7f9}\
header{background:#1d2733;color:#fff;padding:.6rem 1.2rem;display:flex;gap:1.2rem;align-items:center}\
header a{color:#cfe3ff;text-decoration:none}header form{margin-left:auto}\
main{padding:1rem 1.2rem}table{border-collapse:collapse;width:100%;background:#fff}\
th,td{border-bottom:1px solid #e3e6ea;padding:.35rem .5rem;text-align:left;font-size:.9rem;vertical-align:top}\
th{background:#eef1f4}pre{background:#fff;border:1px solid #e3e6ea;padding:.6rem;overflow:auto;font-size:.85rem}\
.status-succeeded{color:#137333}.status-failed{color:#b3261e}.status-pending{color:#8a5a00}\
.state-paused{color:#8a5a00;font-weight:600}.state-tripped{color:#b3261e;font-weight:600}.state-active{color:#137333}\
.notice{background:#e6f4ea;border:1px solid #b7dfc0;padding:.5rem;margin-bottom:.8rem}\
.error{background:#fce8e6;border:1px solid #f4c7c3;padding:.5rem;margin-bottom:.8rem}\
form.inline{display:inline}.charts{display:flex;gap:1rem;flex-wrap:wrap;margin-bottom:.6rem}\
figure.chart{margin:0;font-size:.8rem}fieldset{border:1px solid #e3e6ea;background:#fff;margin-bottom:.8rem}\
input,select,button{font-size:.9rem;margin:.1rem .3rem .1rem 0}";

pub(super) fn page(
    title: &str,
    tenant: Option<&str>,
    csrf: &str,
    notice: Option<&str>,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · hookgate" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    strong { "hookgate" }
                    @if let Some(t) = tenant {
                        a href="/console/events" { "Events" }
                        a href="/console/dead-letters" { "Dead letters" }
                        a href="/console/sources" { "Sources" }
                        a href="/console/destinations" { "Destinations" }
                        a href="/console/undelivered" { "Undelivered" }
                        a href="/console/quarantine" { "Quarantine" }
                        span { "tenant: " (t) }
                        form.inline method="post" action="/console/logout" {
                            input type="hidden" name="csrf" value=(csrf);
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main {
                    @if let Some(n) = notice {
                        div.notice id="notice" { (n) }
                    }
                    (body)
                }
            }
        }
    }
}

pub fn login(csrf: &str, error: Option<&str>) -> Markup {
    page(
        "Log in",
        None,
        csrf,
        None,
        html! {
            h1 { "Log in" }
            @if let Some(e) = error { div.error id="error" { (e) } }
            form method="post" action="/console/login" {
                input type="hidden" name="csrf" value=(csrf);
                label { "Admin token " input type="password" name="token" id="token" autocomplete="off" required; }
                button type="submit" id="login" { "Log in" }
            }
        },
    )
}

pub struct EventsPage<'a> {
    pub tenant: &'a str,
    pub csrf: &'a str,
    pub notice: Option<&'a str>,
    pub filters: &'a [(&'a str, String)],
    pub rows: &'a [EventSummaryView],
    pub next: Option<String>,
    /// Events received per minute over the last hour, per source.
    pub ingest: &'a std::collections::BTreeMap<String, Vec<i64>>,
}

pub fn events(p: EventsPage<'_>) -> Markup {
    let value = |k: &str| {
        p.filters
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    };
    page(
        "Events",
        Some(p.tenant),
        p.csrf,
        p.notice,
        html! {
            h1 { "Events" }
            div.charts id="ingest" {
                @for (source, counts) in p.ingest {
                    @let values: Vec<Option<f64>> = counts.iter().map(|n| Some(*n as f64)).collect();
                    (super::chart::bars(&format!("ingest-{source}"), &format!("{source}: events per minute"), &values, None, |v| format!("{v:.0}")))
                }
            }
            form method="get" action="/console/events" {
                fieldset {
                    input name="source" placeholder="source" value=(value("source"));
                    input name="event_type" placeholder="event type" value=(value("event_type"));
                    select name="status" {
                        @for s in ["", "pending", "in_progress", "succeeded", "failed", "no_route"] {
                            option value=(s) selected[value("status") == s] { @if s.is_empty() { "any status" } @else { (s) } }
                        }
                    }
                    input name="received_from" placeholder="from (RFC 3339)" value=(value("received_from"));
                    input name="received_to" placeholder="to (RFC 3339)" value=(value("received_to"));
                    button type="submit" { "Filter" }
                }
            }
            table id="events" {
                tr { th { "Received" } th { "Source" } th { "Provider event id" } th { "Type" } th { "Id" } }
                @for e in p.rows {
                    tr {
                        td { (e.received_at.format("%Y-%m-%d %H:%M:%S%.3f")) }
                        td { (e.source) }
                        td { a href={ "/console/events/" (e.id) } class="event-link" { (e.provider_event_id) } }
                        td { (e.event_type.as_deref().unwrap_or("")) }
                        td { code { (e.id) } }
                    }
                }
            }
            @if p.rows.is_empty() { p { "No events match." } }
            @if let Some(next) = &p.next { p { a href=(next) id="next" { "Next page →" } } }
        },
    )
}

fn job_rows(jobs: &[JobView]) -> Markup {
    html! {
        @for j in jobs {
            h3 { "Job " code { (j.id) } " → " (j.destination) }
            p {
                "Status: " span class={ "status-" (j.status) } { (j.status) }
                @if j.discarded_at.is_some() { " (discarded)" }
                " · attempts " (j.attempts) " · next attempt " (j.next_attempt_at.to_rfc3339())
                @if let Some(e) = &j.last_error { " · last error: " (e) }
            }
            @if let Some(history) = &j.history {
                table.history {
                    tr { th { "#" } th { "Started" } th { "ms" } th { "Status" } th { "Error" } th { "Outcome" } th { "Worker" } }
                    @for a in history {
                        tr {
                            td { (a.attempt) } td { (a.started_at.to_rfc3339()) } td { (a.duration_ms) }
                            td { (a.status_code.map(|s| s.to_string()).unwrap_or_default()) }
                            td { (a.error.as_deref().unwrap_or("")) } td { (a.outcome) } td { (a.worker_id) }
                        }
                    }
                }
            }
        }
    }
}

pub fn event(tenant: &str, csrf: &str, notice: Option<&str>, e: &EventDetail) -> Markup {
    let pretty = e.body.as_deref().map(|text| {
        serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| text.to_owned())
    });
    page(
        "Event",
        Some(tenant),
        csrf,
        notice,
        html! {
            h1 { "Event " code { (e.id) } }
            p { (e.source) " · " (e.provider_event_id) " · " (e.event_type.as_deref().unwrap_or("no type")) " · received " (e.received_at.to_rfc3339()) }
            p id="verified" { "Verified (" (e.verified_scheme) ") with secret " strong id="verified-secret-index" { (e.verified_secret_index) } " of the source's list (0 = the first)" }
            form method="post" action={ "/console/events/" (e.id) "/replay" } {
                input type="hidden" name="csrf" value=(csrf);
                button type="submit" id="replay" { "Replay to all destinations" }
            }
            h2 { "Headers" }
            table id="headers" { @for h in &e.headers { tr { th { (h.name) } td { (h.value) } } } }
            h2 { "Body" }
            @match &pretty {
                Some(text) => pre id="body" { (text) },
                None => p { "Binary body (" (e.body_base64.len()) " base64 characters); download it from " a href={ "/admin/v1/events/" (e.id) "/raw" } { "the admin API" } "." },
            }
            h2 { "Deliveries" }
            @if e.no_route_matched { p id="no-route" { "No route matched this event: it has no delivery." } }
            (job_rows(&e.jobs))
        },
    )
}

pub fn dead_letters(
    tenant: &str,
    csrf: &str,
    notice: Option<&str>,
    rows: &[DeadLetterView],
    next: Option<String>,
) -> Markup {
    page(
        "Dead letters",
        Some(tenant),
        csrf,
        notice,
        html! {
            h1 { "Dead letters" }
            form method="post" action="/console/dead-letters/retry" {
                fieldset {
                    legend { "Retry all dead letters of" }
                    input type="hidden" name="csrf" value=(csrf);
                    input name="destination" placeholder="destination";
                    input name="source" placeholder="source";
                    button type="submit" id="bulk-retry" { "Retry matching" }
                }
            }
            table id="dead-letters" {
                tr { th { "Failed at" } th { "Destination" } th { "Event" } th { "Attempts" } th { "Last error" } th {} }
                @for d in rows {
                    tr {
                        td { (d.job.updated_at.to_rfc3339()) }
                        td { (d.job.destination) }
                        td { a href={ "/console/events/" (d.event.id) } { (d.event.source) " / " (d.event.provider_event_id) } }
                        td { (d.job.attempts) }
                        td { (d.job.last_error.as_deref().unwrap_or("")) }
                        td {
                            form.inline method="post" action={ "/console/dead-letters/" (d.job.id) "/retry" } {
                                input type="hidden" name="csrf" value=(csrf);
                                button type="submit" class="retry" { "Retry" }
                            }
                            form.inline method="post" action={ "/console/dead-letters/" (d.job.id) "/discard" } {
                                input type="hidden" name="csrf" value=(csrf);
                                button type="submit" class="discard" { "Discard" }
                            }
                        }
                    }
                }
            }
            @if rows.is_empty() { p id="empty" { "No dead letters." } }
            @if let Some(next) = &next { p { a href=(next) id="next" { "Next page →" } } }
        },
    )
}

pub fn sources(tenant: &str, csrf: &str, notice: Option<&str>, rows: &[SourceView]) -> Markup {
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_owned()
        } else {
            v.join(", ")
        }
    };
    page(
        "Sources",
        Some(tenant),
        csrf,
        notice,
        html! {
            h1 { "Sources" }
            table id="sources" {
                tr {
                    th { "Source" } th { "Provider" } th { "Signature" } th { "Secrets" }
                    th { "Event id from" } th { "Type from" } th { "Handshakes" } th { "Destinations" }
                }
                @for s in rows {
                    tr {
                        td {
                            code { "/webhooks/" (s.name) }
                            @if s.reconciled {
                                " " a href={ "/console/sources/" (s.name) "/reconciliations" } { "reconciliation" }
                            }
                        }
                        td { (s.definition) }
                        td { (list(&s.algorithms)) " in " (list(&s.signature_from)) }
                        td { (s.secrets) }
                        td { (list(&s.event_id)) }
                        td { (list(&s.event_type)) }
                        td { (list(&s.handshakes)) }
                        td { (list(&s.destinations)) }
                    }
                }
            }
            @if rows.is_empty() { p id="empty" { "No sources." } }
        },
    )
}
