//! Routing alone: `RouteTable::select` in-process on one thread, with no HTTP and no store,
//! for the `routes` scenario's events on its plain source and on its routed one, and the
//! body's JSON parse alone (what a `match` needs first), alternated pass by pass.

use std::hint::black_box;
use std::time::{Duration, Instant};

use hookgate::routing::EventFacts;
use serde::{Deserialize, Serialize};

use super::route_load::{self, PLAIN_SOURCE, ROUTED_SOURCE};
use crate::gateway::GatewayOpts;
use crate::payload::{self, Scheme};

/// Events per pass.
const EVENTS: u64 = 1_000;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SelectCost {
    pub rounds: usize,
    /// Events routed per case.
    pub events: u64,
    /// µs per event on the plain source (one unconditional route).
    pub plain_us: f64,
    /// µs per event on the routed source (ten globs, the body parsed once, its filters).
    pub filtered_us: f64,
    /// µs per event of `serde_json::from_slice::<Value>` of the body alone.
    pub parse_us: f64,
}

impl SelectCost {
    pub fn line(&self) -> String {
        format!(
            "routing alone: filtered {:.2} µs/event, plain {:.2} µs/event (the body's parse alone {:.2} µs); {} rounds of {} events",
            self.filtered_us, self.plain_us, self.parse_us, self.rounds, EVENTS
        )
    }
}

/// Alternates the three cases, a pass of `EVENTS` each, for `total` (two rounds at least).
pub fn measure(opts: &GatewayOpts, total: Duration) -> anyhow::Result<SelectCost> {
    let config = route_load::gateway_config(opts)?;
    let tables = [
        &config.sources[PLAIN_SOURCE].routes,
        &config.sources[ROUTED_SOURCE].routes,
    ];
    let events: Vec<(Vec<u8>, &'static str)> = (0..EVENTS)
        .map(|i| {
            let shape = route_load::shape(i);
            let id = payload::event_id(Scheme::Stripe, i);
            (
                route_load::body(&id, 1_700_000_000, &shape, 512),
                shape.event_type,
            )
        })
        .collect();
    let pass = |case: usize| -> Duration {
        let clock = Instant::now();
        for (body, event_type) in &events {
            if case == 2 {
                black_box(serde_json::from_slice::<serde_json::Value>(body).ok());
                continue;
            }
            let facts = EventFacts {
                event_type: Some(event_type),
                content_type: Some("application/json"),
                headers: &[],
                body,
            };
            black_box(tables[case].select(black_box(&facts)));
        }
        clock.elapsed()
    };
    for case in 0..3 {
        pass(case); // warm-up
    }
    let mut spent = [Duration::ZERO; 3];
    let (clock, mut rounds) = (Instant::now(), 0);
    while clock.elapsed() < total || rounds < 2 {
        let order = if rounds % 2 == 0 {
            [0, 1, 2]
        } else {
            [2, 1, 0]
        };
        for case in order {
            spent[case] += pass(case);
        }
        rounds += 1;
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6 / (EVENTS as f64 * rounds as f64);
    Ok(SelectCost {
        rounds,
        events: EVENTS * rounds as u64,
        plain_us: us(spent[0]),
        filtered_us: us(spent[1]),
        parse_us: us(spent[2]),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn measures_every_case() {
        let opts = super::super::route_load::tests::opts();
        let cost = super::measure(&opts, std::time::Duration::ZERO).unwrap();
        assert_eq!(cost.rounds, 2);
        assert!(cost.plain_us > 0.0 && cost.filtered_us > 0.0 && cost.parse_us > 0.0);
    }
}
