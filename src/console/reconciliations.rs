//! The console's page of a source's reconciliation runs against its provider's API
//! (docs/RECOVERY.md): newest first, what each listed, found missing and recovered, its
//! errors and whether it finished the list. Linked from the sources page.

use actix_web::{web, HttpRequest, HttpResponse};
use maud::{html, Markup};

use super::handlers::html;
use super::pages::page;
use super::request::{error_page, session};
use crate::admin::reconciliations::{runs, source_in_tenant, ReconciliationView};
use crate::http::AppState;

/// Runs shown: the newest.
const SHOWN: i64 = 50;

pub async fn list(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
) -> HttpResponse {
    let s = match session(&state, &req).await {
        Ok(s) => s,
        Err(denied) => return denied.response(),
    };
    let source = match source_in_tenant(&state, s.tenant.as_str(), &path) {
        Ok(source) => source,
        Err(e) => return error_page(e),
    };
    let configured = source.reconcile.as_ref().map(|r| {
        format!(
            "{} API, every {}, looking back {}",
            r.provider.name(),
            humantime::format_duration(r.interval),
            humantime::format_duration(r.lookback)
        )
    });
    match runs(&state, source.name.as_str(), SHOWN).await {
        Ok(rows) => html(render(
            s.tenant.as_str(),
            &s.csrf,
            source.name.as_str(),
            configured.as_deref(),
            &rows,
        )),
        Err(e) => error_page(e),
    }
}

fn render(
    tenant: &str,
    csrf: &str,
    source: &str,
    configured: Option<&str>,
    rows: &[ReconciliationView],
) -> Markup {
    page(
        "Reconciliation",
        Some(tenant),
        csrf,
        None,
        html! {
            h1 { "Reconciliation of " (source) }
            @match configured {
                Some(c) => p id="configured" { "Against the " (c) "." },
                None => p id="configured" { "Not configured: the source has no [sources.reconcile]." },
            }
            table id="reconciliations" {
                tr {
                    th { "Started" } th { "By" } th { "Window" } th { "Listed" } th { "Missing" }
                    th { "Recovered" } th { "Errors" } th { "Last error" } th { "Finished the list" }
                }
                @for r in rows {
                    tr {
                        td { (r.started_at.to_rfc3339()) }
                        td { (r.run_by) }
                        td { (r.since.to_rfc3339()) " – " (r.until.to_rfc3339()) }
                        td class="listed" { (r.listed) }
                        td class="missing" { (r.missing) }
                        td class="recovered" { (r.recovered) }
                        td class="errors" { (r.errors) }
                        td { (r.last_error.as_deref().unwrap_or("-")) }
                        td { @if r.cursor.is_none() { "yes" } @else { "no: the next run goes on" } }
                    }
                }
            }
            @if rows.is_empty() { p id="empty" { "No runs yet." } }
        },
    )
}
