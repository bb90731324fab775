//! Stripe: `GET /v1/events?created[gte]=..&limit=100[&starting_after=evt_..]`, newest first;
//! `has_more` says whether another page follows, which starts after the last id listed. A
//! missing event is ingested from the API's JSON: it is the object the webhook carries, with
//! the same `evt_` id, so a webhook arriving later is a duplicate.

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde::Deserialize;

use super::client::{ApiClient, ApiError};
use super::{Listed, Page, Recovery};
use crate::config::ReconcileConfig;

/// The largest page Stripe serves.
const PAGE_SIZE: u32 = 100;

#[derive(Deserialize)]
struct List {
    data: Vec<serde_json::Value>,
    has_more: bool,
}

pub(super) async fn page(
    client: &ApiClient,
    config: &ReconcileConfig,
    since: DateTime<Utc>,
    cursor: Option<&str>,
) -> Result<Page, ApiError> {
    let mut query = format!(
        "/v1/events?created%5Bgte%5D={}&limit={PAGE_SIZE}",
        since.timestamp()
    );
    if let Some(after) = cursor {
        query.push_str("&starting_after=");
        query.push_str(&super::query_value(after));
    }
    let response = client.call(config, Method::GET, &query).await?;
    let call = "GET /v1/events";
    let list: List = serde_json::from_slice(&response.body)
        .map_err(|e| ApiError::invalid(call, format!("not an event list: {e}")))?;
    let mut items = Vec::with_capacity(list.data.len());
    for event in list.data {
        let id = event
            .get("id")
            .and_then(|v| v.as_str())
            .ok_or_else(|| ApiError::invalid(call, "an event without an id"))?
            .to_owned();
        let event_type = event
            .get("type")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let body = serde_json::to_vec(&event).expect("a JSON value serialises");
        items.push(Listed {
            provider_event_id: id,
            recovery: Recovery::Ingest {
                scheme: "stripe-api",
                event_type,
                body: body.into(),
            },
        });
    }
    let next = if list.has_more {
        Some(
            items
                .last()
                .map(|l| l.provider_event_id.clone())
                .ok_or_else(|| ApiError::invalid(call, "has_more on an empty page"))?,
        )
    } else {
        None
    };
    Ok(Page { items, next })
}
