//! The `routes` scenario's configuration and events: two Stripe sources with the same
//! secret, one with a plain destination and one with ten filtered routes, and Stripe events
//! of varied types, amounts and currencies, each of which matches exactly one of the ten
//! routes. The other nine reject it by its type (`event_types`) or by its amount (`match`).

use std::io::Write as _;

use anyhow::anyhow;
use hookgate::config::{GatewayConfig, Settings};

use crate::gateway::{render_toml, GatewayOpts, GwConfig};
use crate::payload::{self, bench_sources, Scheme, SourceSpec};

/// A destination nobody listens on: role `api` starts no workers.
pub const NO_SINK: &str = "http://127.0.0.1:9/unused";

/// The source with one plain destination: `destinations = ["sink"]`.
pub const PLAIN_SOURCE: &str = "stripe-plain";
/// The source with ten `[[sources.routes]]`, to `sink-0` .. `sink-9`.
pub const ROUTED_SOURCE: &str = "stripe-routed";
/// How many routes the routed source has.
pub const ROUTES: usize = 10;

/// The event-type families: each one's glob (two routes share it, split by amount), the
/// types its events carry and the `object` of their `data.object`.
const FAMILIES: [(&str, [&str; 2], &str); ROUTES / 2] = [
    (
        "invoice.*",
        ["invoice.paid", "invoice.payment_failed"],
        "invoice",
    ),
    (
        "charge.*",
        ["charge.succeeded", "charge.refunded"],
        "charge",
    ),
    (
        "customer.subscription.*",
        [
            "customer.subscription.created",
            "customer.subscription.updated",
        ],
        "subscription",
    ),
    (
        "payment_intent.*",
        ["payment_intent.succeeded", "payment_intent.canceled"],
        "payment_intent",
    ),
    (
        "checkout.session.*",
        ["checkout.session.completed", "checkout.session.expired"],
        "checkout.session",
    ),
];

/// Amounts below this go to a family's small-amount route, the others to its large one.
const THRESHOLD: u64 = 1_000;
const CURRENCIES: [&str; 3] = ["usd", "eur", "gbp"];

/// Both sources have the bench's Stripe secret.
pub fn stripe_secret() -> String {
    bench_sources()
        .into_iter()
        .find(|s| s.scheme == Scheme::Stripe)
        .map(|s| s.secret)
        .expect("the bench has a Stripe source")
}

/// A source of the scenario, as the load generator signs for it.
pub fn source(name: &str) -> SourceSpec {
    SourceSpec {
        name: name.into(),
        scheme: Scheme::Stripe,
        secret: stripe_secret(),
    }
}

/// The destination route `k` goes to.
pub fn destination(k: usize) -> String {
    format!("sink-{k}")
}

/// The `[[sources]]` tables: the plain source, then the routed one with its routes.
pub fn sources_toml() -> Vec<String> {
    let secret = stripe_secret();
    let plain = format!(
        "[[sources]]\nname = \"{PLAIN_SOURCE}\"\nprovider = \"stripe\"\nsecrets = [\"{secret}\"]\ndestinations = [\"sink\"]\n"
    );
    let mut routed =
        format!("[[sources]]\nname = \"{ROUTED_SOURCE}\"\nprovider = \"stripe\"\nsecrets = [\"{secret}\"]\n");
    for k in 0..ROUTES {
        let (glob, _, _) = FAMILIES[k / 2];
        let amount = if k % 2 == 0 {
            format!("amount = {{ \"$lt\" = {THRESHOLD} }}")
        } else {
            format!("amount = {{ \"$gte\" = {THRESHOLD} }}, currency = {{ \"$in\" = [\"usd\", \"eur\", \"gbp\"] }}")
        };
        routed.push_str(&format!(
            "\n[[sources.routes]]\ndestination = \"{}\"\nevent_types = [\"{glob}\"]\nmatch = {{ data = {{ object = {{ {amount} }} }} }}\n",
            destination(k)
        ));
    }
    vec![plain, routed]
}

/// The `[[destinations]]` tables of the routes, all at `url` (as `sink`).
pub fn destinations_toml(url: &str, max_in_flight: usize) -> Vec<String> {
    (0..ROUTES)
        .map(|k| {
            format!(
                "[[destinations]]\nname = \"{}\"\nurl = \"{url}\"\nsigning_secret = \"whsec_YmVuY2gtc2luay1zaWduaW5nLWtleS0wMDAwMDA=\"\nretry_schedule = [\"1s\", \"5s\", \"30s\"]\ntimeout = \"10s\"\nmax_in_flight = {max_in_flight}\n",
                destination(k)
            )
        })
        .collect()
}

/// The scenario's gateway configuration on `db_url`: the bench's own two sources and `sink`,
/// then the plain and the routed source and the routes' destinations.
pub fn gw_config(db_url: &str, max_in_flight: usize) -> GwConfig {
    let mut cfg = GwConfig::new(db_url, NO_SINK);
    cfg.extra_sources = sources_toml();
    cfg.extra_destinations = destinations_toml(NO_SINK, max_in_flight);
    cfg
}

/// That configuration as the gateway loads it (the database is not opened).
pub fn gateway_config(opts: &GatewayOpts) -> anyhow::Result<GatewayConfig> {
    let text = render_toml(opts, &gw_config("sqlite://unused.db", opts.max_in_flight));
    let settings = Settings::from_toml_str(&text).map_err(|e| anyhow!("{e}"))?;
    GatewayConfig::from_settings(&settings).map_err(|e| anyhow!("{e}"))
}

/// What event number `i` of a segment is: the route it matches and what it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub route: usize,
    pub event_type: &'static str,
    pub object: &'static str,
    pub amount: u64,
    pub currency: &'static str,
}

/// Event `i`'s shape: routes spread evenly but not in turn (a hash of `i`), the same
/// sequence in every segment, so both legs send the same events but for their ids.
pub fn shape(i: u64) -> Shape {
    let h = payload::mix(i ^ 0x726f_7574_6573);
    let route = (h % ROUTES as u64) as usize;
    let (_, types, object) = FAMILIES[route / 2];
    let spread = (h >> 16) % 50_000;
    let amount = if route.is_multiple_of(2) {
        50 + spread % (THRESHOLD - 50)
    } else {
        THRESHOLD + spread
    };
    Shape {
        route,
        event_type: types[((h >> 8) & 1) as usize],
        object,
        amount,
        currency: CURRENCIES[((h >> 40) % 3) as usize],
    }
}

/// A Stripe-shaped event body of `shape`, padded to `size` bytes when `size` allows.
pub fn body(event_id: &str, created: i64, shape: &Shape, size: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(size + 64);
    let _ = write!(
        b,
        r#"{{"id":"{event_id}","object":"event","api_version":"2024-06-20","created":{created},"type":"{}","livemode":false,"pending_webhooks":1,"request":{{"id":null,"idempotency_key":null}},"data":{{"object":{{"id":"obj_1PbenchAbCdEfGh","object":"{}","amount":{},"currency":"{}","customer":"cus_QbenchCustomer01","status":"paid","description":""#,
        shape.event_type, shape.object, shape.amount, shape.currency
    );
    let tail: &[u8] = br#""}}}"#;
    let pad = size.saturating_sub(b.len() + tail.len());
    b.resize(b.len() + pad, b'x');
    b.extend_from_slice(tail);
    b
}

/// `count` signed requests to `source` with fresh ids, event `i` of shape `shape(i)`.
pub fn requests(host: &str, source: &SourceSpec, count: usize, body_size: usize) -> Vec<Vec<u8>> {
    let now = chrono::Utc::now().timestamp();
    let offset = fastrand::u64(..);
    (0..count as u64)
        .map(|i| {
            let id = payload::event_id(Scheme::Stripe, offset.wrapping_add(i));
            let body = body(&id, now, &shape(i), body_size);
            let mut out = Vec::with_capacity(body.len() + 512);
            payload::write_request(&mut out, host, source, &id, &body, now);
            out
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::PathBuf;

    use hookgate::routing::EventFacts;

    use super::*;

    pub(crate) fn opts() -> GatewayOpts {
        GatewayOpts {
            bin: PathBuf::from("hookgate"),
            rust_log: "warn".into(),
            pool: 16,
            worker_concurrency: 128,
            max_in_flight: 128,
            work_dir: PathBuf::from("/tmp"),
        }
    }

    fn config() -> GatewayConfig {
        gateway_config(&opts()).unwrap_or_else(|e| panic!("{e:#}"))
    }

    fn selected(config: &GatewayConfig, source: &str, body: &[u8]) -> Vec<String> {
        let doc: serde_json::Value = serde_json::from_slice(body).unwrap();
        let facts = EventFacts {
            event_type: doc["type"].as_str(),
            content_type: Some("application/json"),
            headers: &[],
            body,
        };
        config.sources[source]
            .routes
            .select(&facts)
            .into_iter()
            .map(|r| r.destination.to_string())
            .collect()
    }

    #[test]
    fn the_routed_source_has_ten_filtered_routes() {
        let config = config();
        let routes = config.sources[ROUTED_SOURCE].routes.routes();
        assert_eq!(routes.len(), ROUTES);
        for r in routes {
            assert!(!r.event_types.is_empty() && r.body.is_some(), "{r:?}");
        }
        let plain = config.sources[PLAIN_SOURCE].routes.routes();
        assert_eq!(plain.len(), 1);
        assert!(!plain[0].is_conditional());
    }

    /// Every event goes to exactly one destination from either source: on the routed one,
    /// the route of its shape. Of the other nine, its family's other route takes its type
    /// and its body filter rejects it; the other eight reject its type.
    #[test]
    fn each_event_matches_exactly_one_route() {
        let config = config();
        let globs: Vec<_> = FAMILIES
            .iter()
            .map(|(g, _, _)| hookgate::routing::EventTypePattern::parse(g).unwrap())
            .collect();
        let mut per_route = [0u32; ROUTES];
        for i in 0..2_000 {
            let s = shape(i);
            let b = body(
                &payload::event_id(Scheme::Stripe, i),
                1_700_000_000,
                &s,
                512,
            );
            assert_eq!(b.len(), 512);
            assert_eq!(
                selected(&config, ROUTED_SOURCE, &b),
                [destination(s.route)],
                "{s:?}"
            );
            assert_eq!(selected(&config, PLAIN_SOURCE, &b), ["sink"]);
            for k in 0..ROUTES {
                let type_matches = globs[k / 2].matches(s.event_type);
                assert_eq!(type_matches, k / 2 == s.route / 2, "route {k}, {s:?}");
            }
            per_route[s.route] += 1;
        }
        for (k, n) in per_route.iter().enumerate() {
            assert!((140..260).contains(n), "route {k}: {n} of 2,000");
        }
    }

    #[test]
    fn requests_are_signed_http_to_their_source() {
        let reqs = requests("h:1", &source(ROUTED_SOURCE), 3, 512);
        assert_eq!(reqs.len(), 3);
        let text = String::from_utf8(reqs[1].clone()).unwrap();
        assert!(
            text.starts_with("POST /webhooks/stripe-routed HTTP/1.1\r\n"),
            "{text}"
        );
        assert!(text.contains("Stripe-Signature: t="), "{text}");
        let (_, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(body.len(), 512);
        let doc: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(doc["type"], shape(1).event_type);
    }
}
