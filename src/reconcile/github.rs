//! GitHub: a hook's deliveries, `GET {hook}/deliveries?per_page=100[&cursor=..]`, newest
//! first, the next page's cursor in the `Link` header (`rel="next"`). A delivery whose `guid`
//! (the `X-GitHub-Delivery` hookgate dedupes on) is not stored is redelivered by GitHub,
//! `POST {hook}/deliveries/{id}/attempts`: it arrives signed and takes the normal path.

use chrono::{DateTime, Utc};
use reqwest::header::LINK;
use reqwest::Method;
use serde::Deserialize;

use super::client::{ApiClient, ApiError};
use super::{Listed, Page, Recovery};
use crate::config::ReconcileConfig;

const PAGE_SIZE: u32 = 100;

#[derive(Deserialize)]
struct Delivery {
    id: u64,
    guid: String,
    delivered_at: DateTime<Utc>,
}

pub(super) async fn page(
    client: &ApiClient,
    config: &ReconcileConfig,
    hook_path: &str,
    since: DateTime<Utc>,
    cursor: Option<&str>,
) -> Result<Page, ApiError> {
    let mut query = format!("{hook_path}/deliveries?per_page={PAGE_SIZE}");
    if let Some(c) = cursor {
        query.push_str("&cursor=");
        query.push_str(&super::query_value(c));
    }
    let response = client.call(config, Method::GET, &query).await?;
    let call = format!("GET {hook_path}/deliveries");
    let deliveries: Vec<Delivery> = serde_json::from_slice(&response.body)
        .map_err(|e| ApiError::invalid(&call, format!("not a list of deliveries: {e}")))?;
    let older = deliveries.iter().any(|d| d.delivered_at < since);
    let items = deliveries
        .into_iter()
        .filter(|d| d.delivered_at >= since)
        .map(|d| Listed {
            provider_event_id: d.guid,
            recovery: Recovery::Request {
                path: format!("{hook_path}/deliveries/{}/attempts", d.id),
            },
        })
        .collect();
    // Newest first: once a delivery is older than the window, so is every later page.
    let next = if older {
        None
    } else {
        response
            .headers
            .get_all(LINK)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(next_cursor)
    };
    Ok(Page { items, next })
}

/// The `cursor` parameter of a `Link` header's `rel="next"` URL. Only the cursor is kept:
/// the next call goes to the configured API base, not to a URL the answer names.
pub(super) fn next_cursor(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let next = params
            .split(';')
            .any(|p| p.trim().replace(' ', "") == "rel=\"next\"");
        if !next {
            return None;
        }
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let url = url::Url::parse(target).ok()?;
        let cursor = url
            .query_pairs()
            .find(|(k, _)| k == "cursor")
            .map(|(_, v)| v.into_owned());
        cursor
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_next_cursor_comes_from_the_link_header() {
        let link = "<https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=100&cursor=v1_12%3D>; rel=\"next\", <https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=100>; rel=\"first\"";
        assert_eq!(super::next_cursor(link).as_deref(), Some("v1_12="));
        assert_eq!(
            super::next_cursor("<https://x/y?cursor=a>; rel=\"prev\""),
            None
        );
        assert_eq!(super::next_cursor("garbage"), None);
    }
}
