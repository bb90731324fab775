//! Paddle Billing: failed notifications, `GET /notifications?status=failed&per_page=..
//! [&after=ntf_..][&from=..]`, the next page's `after` in `meta.pagination.next`. A failed
//! notification whose `payload.event_id` (the id hookgate dedupes on) is not stored is
//! replayed by Paddle, `POST /notifications/{id}/replay`: it arrives signed and takes the
//! normal path.

use chrono::{DateTime, SecondsFormat, Utc};
use reqwest::Method;
use serde::Deserialize;

use super::client::{ApiClient, ApiError};
use super::{Listed, Page, Recovery};
use crate::config::ReconcileConfig;

/// Paddle serves up to 200 notifications a page.
const PAGE_SIZE: u32 = 200;

#[derive(Deserialize)]
struct List {
    data: Vec<Notification>,
    meta: Meta,
}

#[derive(Deserialize)]
struct Meta {
    pagination: Pagination,
}

#[derive(Deserialize)]
struct Pagination {
    next: Option<String>,
    has_more: bool,
}

#[derive(Deserialize)]
struct Notification {
    id: String,
    payload: Payload,
}

#[derive(Deserialize)]
struct Payload {
    event_id: String,
}

pub(super) async fn page(
    client: &ApiClient,
    config: &ReconcileConfig,
    notification_setting_id: Option<&str>,
    since: DateTime<Utc>,
    cursor: Option<&str>,
) -> Result<Page, ApiError> {
    let mut query = format!(
        "/notifications?status=failed&per_page={PAGE_SIZE}&from={}",
        super::query_value(&since.to_rfc3339_opts(SecondsFormat::Secs, true))
    );
    if let Some(setting) = notification_setting_id {
        query.push_str("&notification_setting_id=");
        query.push_str(&super::query_value(setting));
    }
    if let Some(after) = cursor {
        query.push_str("&after=");
        query.push_str(&super::query_value(after));
    }
    let response = client.call(config, Method::GET, &query).await?;
    let call = "GET /notifications";
    let list: List = serde_json::from_slice(&response.body)
        .map_err(|e| ApiError::invalid(call, format!("not a notification list: {e}")))?;
    let items = list
        .data
        .into_iter()
        .map(|n| Listed {
            provider_event_id: n.payload.event_id,
            recovery: Recovery::Request {
                path: format!("/notifications/{}/replay", super::query_value(&n.id)),
            },
        })
        .collect();
    let next = match (list.meta.pagination.has_more, list.meta.pagination.next) {
        (true, Some(next)) => Some(after_param(&next).ok_or_else(|| {
            ApiError::invalid(call, "meta.pagination.next has no `after` parameter")
        })?),
        _ => None,
    };
    Ok(Page { items, next })
}

/// The `after` parameter of Paddle's `next` URL. Only the cursor is kept: the next call goes
/// to the configured API base, not to a URL the answer names.
fn after_param(next: &str) -> Option<String> {
    let url = url::Url::parse(next).ok()?;
    let after = url
        .query_pairs()
        .find(|(k, _)| k == "after")
        .map(|(_, v)| v.into_owned());
    after
}
