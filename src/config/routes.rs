//! A source's `destinations` and `[[sources.routes]]` become its `RouteTable`: every filter
//! compiled and every pattern parsed here, so a mistake stops `hookgate check` and the start,
//! naming the key, and never surfaces at the first request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::destination::Destination;
use super::settings::SourceSettings;
use super::ConfigError;
use crate::routing::{
    EventTypePattern, Filter, KeyLocation, OrderingRule, Route, RouteTable, MAX_ROUTE_DELAY,
};

fn invalid(key: String, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        problem: problem.into(),
    }
}

/// The routes of `sources[i]`: first one unconditional route per entry of `destinations`,
/// then the `routes` tables in order.
pub(super) fn route_table(
    i: usize,
    src: &SourceSettings,
    destinations: &BTreeMap<String, Arc<Destination>>,
) -> Result<RouteTable, ConfigError> {
    let known = |key: String, name: &str| {
        destinations
            .get(name)
            .map(|d| d.name.clone())
            .ok_or_else(|| invalid(key, format!("names unknown destination {name:?}")))
    };
    let mut routes = Vec::new();
    for (j, d) in src.destinations.iter().enumerate() {
        let name = known(format!("sources[{i}].destinations[{j}]"), d)?;
        routes.push(Route::unconditional(name));
    }
    for (j, r) in src.routes.iter().enumerate() {
        let key = |k: &str| format!("sources[{i}].routes[{j}].{k}");
        let destination = known(key("destination"), &r.destination)?;
        let event_types = match &r.event_types {
            None => Vec::new(),
            Some(list) if list.is_empty() => {
                return Err(invalid(
                    key("event_types"),
                    "is empty, so no event would match: leave it out to route every type",
                ))
            }
            Some(list) => list
                .iter()
                .enumerate()
                .map(|(k, p)| {
                    EventTypePattern::parse(p).map_err(|e| {
                        invalid(format!("sources[{i}].routes[{j}].event_types[{k}]"), e)
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        let filter_error = |e: crate::routing::FilterError| {
            invalid(format!("sources[{i}].routes[{j}].{}", e.path), e.reason)
        };
        let body = r
            .body
            .as_ref()
            .map(Filter::compile)
            .transpose()
            .map_err(filter_error)?;
        let headers = r
            .match_headers
            .as_ref()
            .map(Filter::compile_headers)
            .transpose()
            .map_err(filter_error)?;
        let delay = match &r.delay {
            None => Duration::ZERO,
            Some(text) => {
                let delay = humantime::parse_duration(text).map_err(|e| {
                    invalid(
                        key("delay"),
                        format!("is {text:?}, not a duration like \"10m\": {e}"),
                    )
                })?;
                if delay > MAX_ROUTE_DELAY {
                    return Err(invalid(key("delay"), "must be at most 7 days"));
                }
                delay
            }
        };
        let ordering = match (&r.ordering_key, &r.on_dead_letter) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(invalid(
                    key("on_dead_letter"),
                    "applies only to a route with `ordering_key`",
                ))
            }
            (Some(location), on_dead_letter) => Some(OrderingRule {
                location: KeyLocation::parse(location)
                    .map_err(|e| invalid(key("ordering_key"), e))?,
                hold: OrderingRule::parse_on_dead_letter(on_dead_letter.as_deref())
                    .map_err(|e| invalid(key("on_dead_letter"), e))?,
            }),
        };
        let written = serde_json::json!([
            destination.as_str(),
            r.event_types,
            r.body,
            r.match_headers,
            delay.as_millis() as u64,
        ])
        .to_string();
        routes.push(Route {
            destination,
            event_types,
            body,
            headers,
            delay,
            written,
            ordering,
        });
    }
    Ok(RouteTable::new(routes))
}

#[cfg(test)]
mod tests {
    use crate::config::{GatewayConfig, Settings};
    use crate::routing::EventFacts;

    const BASE: &str = r#"
[[destinations]]
name = "billing"
url = "http://127.0.0.1:1/billing"
signing_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

[[destinations]]
name = "audit"
url = "http://127.0.0.1:1/audit"
signing_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

[[sources]]
name = "shop"
provider = "hmac-sha256"
secrets = ["s"]
signature_header = "X-Signature"
event_id = "header:X-Id"
event_type = "header:X-Type"
destinations = ["audit"]
"#;

    fn load(routes: &str) -> Result<GatewayConfig, String> {
        let settings =
            Settings::from_toml_str(&format!("{BASE}{routes}")).map_err(|e| e.to_string())?;
        GatewayConfig::from_settings(&settings).map_err(|e| e.to_string())
    }

    fn selected(config: &GatewayConfig, event_type: Option<&str>, body: &str) -> Vec<String> {
        let facts = EventFacts {
            event_type,
            content_type: Some("application/json"),
            headers: &[],
            body: body.as_bytes(),
        };
        config.sources["shop"]
            .routes
            .select(&facts)
            .into_iter()
            .map(|r| r.destination.to_string())
            .collect()
    }

    #[test]
    fn filter_keys_keep_their_case_through_the_configuration_loader() {
        let config = load(
            r#"
[[sources.routes]]
destination = "billing"
event_types = ["order.*"]
match = { orderId = { "$startsWith" = "A" }, Total = { "$gte" = 10 } }
"#,
        )
        .unwrap();
        let body = r#"{"orderId": "A-1", "Total": 12}"#;
        assert_eq!(
            selected(&config, Some("order.paid"), body),
            ["audit", "billing"]
        );
        let lower = r#"{"orderid": "A-1", "total": 12}"#;
        assert_eq!(selected(&config, Some("order.paid"), lower), ["audit"]);
        assert_eq!(selected(&config, Some("invoice.paid"), body), ["audit"]);
        assert_eq!(config.sources["shop"].destinations.len(), 2);
    }

    #[test]
    fn mistakes_name_the_key_inside_the_route() {
        let cases = [
            (
                "destination = \"nowhere\"",
                "`sources[0].routes[0].destination` names unknown destination \"nowhere\"",
            ),
            (
                "destination = \"billing\"\nevent_types = []",
                "`sources[0].routes[0].event_types` is empty",
            ),
            (
                "destination = \"billing\"\nevent_types = [\"a\", \"\"]",
                "`sources[0].routes[0].event_types[1]` an event type pattern must not be empty",
            ),
            (
                "destination = \"billing\"\nmatch = { data = { amount = { \"$gt\" = [1] } } }",
                "`sources[0].routes[0].match.data.amount` $gt takes a number or a string",
            ),
            (
                "destination = \"billing\"\nmatch_headers = { x-a = { \"$bogus\" = 1 } }",
                "`sources[0].routes[0].match_headers.x-a`",
            ),
            (
                "destination = \"billing\"\ndelay = \"8days\"",
                "`sources[0].routes[0].delay` must be at most 7 days",
            ),
            (
                "destination = \"billing\"\ndelay = \"soon\"",
                "`sources[0].routes[0].delay` is \"soon\", not a duration",
            ),
            (
                "destination = \"billing\"\nordering_key = \"customer\"",
                "`sources[0].routes[0].ordering_key` is \"customer\"; expected",
            ),
            (
                "destination = \"billing\"\nordering_key = \"json:customer\"",
                "`sources[0].routes[0].ordering_key` is \"json:customer\": a JSON pointer",
            ),
            (
                "destination = \"billing\"\nordering_key = \"json:/c\"\non_dead_letter = \"drop\"",
                "`sources[0].routes[0].on_dead_letter` is \"drop\"; expected \"hold\" or \"skip\"",
            ),
            (
                "destination = \"billing\"\non_dead_letter = \"skip\"",
                "`sources[0].routes[0].on_dead_letter` applies only to a route with `ordering_key`",
            ),
        ];
        for (route, expected) in cases {
            let err = load(&format!("[[sources.routes]]\n{route}\n")).unwrap_err();
            assert!(err.contains(expected), "{route}: {err}");
        }
    }

    #[test]
    fn the_digest_changes_with_any_condition_and_only_then() {
        let digest = |routes: &str| load(routes).unwrap().sources["shop"].routes.digest();
        let a = "[[sources.routes]]\ndestination = \"billing\"\nevent_types = [\"a.*\"]\n";
        assert_eq!(digest(a), digest(a));
        for other in [
            "[[sources.routes]]\ndestination = \"billing\"\nevent_types = [\"b.*\"]\n",
            "[[sources.routes]]\ndestination = \"billing\"\nevent_types = [\"a.*\"]\ndelay = \"1s\"\n",
            "[[sources.routes]]\ndestination = \"billing\"\nevent_types = [\"a.*\"]\nmatch = { x = 1 }\n",
            "[[sources.routes]]\ndestination = \"audit\"\nevent_types = [\"a.*\"]\n",
            "",
        ] {
            assert_ne!(digest(a), digest(other), "{other}");
        }
    }
}
