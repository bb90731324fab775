//! A source's routes: which destinations an event goes to, and when. The table is built
//! from the configuration once; [`RouteTable::select`] runs at ingest (in the request, before
//! the event joins its batch), at replay and in the reconciler's repair of events routed by
//! another configuration.

use std::time::Duration;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::ordering::{JobOrdering, OrderingRule};
use super::{EventTypePattern, Filter};
use crate::domain::Name;
use crate::store::StoredEvent;

/// The longest `delay` a route may have. A delayed job waits in the queue, and the queue is
/// kept for `retention.events` (30 days by default): a week leaves room for retries after it.
pub const MAX_ROUTE_DELAY: Duration = Duration::from_secs(7 * 24 * 3600);

/// One route: a destination, and the conditions an event must meet to go there.
#[derive(Debug, Clone)]
pub struct Route {
    pub destination: Name,
    /// Empty: every event type, and events without one.
    pub event_types: Vec<EventTypePattern>,
    /// `match`: the body, read as JSON (or as a form, see [`EventFacts::document`]).
    pub body: Option<Filter>,
    /// `match_headers`.
    pub headers: Option<Filter>,
    /// The job is due no earlier than this after the event was received.
    pub delay: Duration,
    /// The conditions as configured, for [`RouteTable::digest`]. The ordering is not among
    /// them: it does not change which destinations an event goes to.
    pub written: String,
    /// `ordering_key` and `on_dead_letter`: jobs sharing a key go out one at a time, in
    /// ingest order.
    pub ordering: Option<OrderingRule>,
}

impl Route {
    /// A route with no conditions and no delay: the `destinations = [...]` shorthand.
    pub fn unconditional(destination: Name) -> Self {
        let written = format!("{destination}|||");
        Self {
            destination,
            event_types: Vec::new(),
            body: None,
            headers: None,
            delay: Duration::ZERO,
            written,
            ordering: None,
        }
    }

    /// Whether the route names conditions (an event may not match it).
    pub fn is_conditional(&self) -> bool {
        !self.event_types.is_empty() || self.body.is_some() || self.headers.is_some()
    }

    fn matches(&self, event: &EventFacts<'_>, document: &mut Document) -> bool {
        if !self.event_types.is_empty() {
            let Some(event_type) = event.event_type else {
                return false;
            };
            if !self.event_types.iter().any(|p| p.matches(event_type)) {
                return false;
            }
        }
        if let Some(filter) = &self.headers {
            if !filter.matches_header_pairs(event.headers.iter().map(|(n, v)| (*n, *v))) {
                return false;
            }
        }
        if let Some(filter) = &self.body {
            match document.get(event) {
                Some(body) => filter.matches(body),
                None => false,
            }
        } else {
            true
        }
    }
}

/// What routing reads of an event.
#[derive(Debug, Clone, Copy)]
pub struct EventFacts<'a> {
    pub event_type: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

impl EventFacts<'_> {
    /// The body as a JSON document for `match`: the body parsed as JSON; or, for a form
    /// (`application/x-www-form-urlencoded`, as Twilio and Slack send), an object of its
    /// fields, a field sent more than once an array of its values. Otherwise none, and no
    /// route with `match` matches.
    pub fn document(&self) -> Option<Value> {
        if let Ok(value) = serde_json::from_slice::<Value>(self.body) {
            return Some(value);
        }
        let is_form = self.content_type.is_some_and(|c| {
            c.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
        if !is_form {
            return None;
        }
        let mut fields = serde_json::Map::new();
        for (name, value) in url::form_urlencoded::parse(self.body) {
            let value = Value::String(value.into_owned());
            match fields.entry(name.into_owned()) {
                serde_json::map::Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                serde_json::map::Entry::Occupied(mut slot) => match slot.get_mut() {
                    Value::Array(values) => values.push(value),
                    first => *first = Value::Array(vec![first.take(), value]),
                },
            }
        }
        Some(Value::Object(fields))
    }
}

/// The body document, parsed at most once per event and only if a route reads it.
enum Document {
    Unread,
    Read(Option<Value>),
}

impl Document {
    fn get(&mut self, event: &EventFacts<'_>) -> Option<&Value> {
        if let Self::Unread = self {
            *self = Self::Read(event.document());
        }
        match self {
            Self::Read(document) => document.as_ref(),
            Self::Unread => None,
        }
    }
}

/// A destination an event is routed to, and how long after its receipt the job is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    pub destination: Name,
    pub delay: Duration,
    /// The job's ordering key, when its route names one and the event has it.
    pub ordering: Option<JobOrdering>,
}

/// A source's routes, in configuration order.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    routes: Vec<Route>,
    digest: i64,
}

impl RouteTable {
    pub fn new(routes: Vec<Route>) -> Self {
        let mut hash = Sha256::new();
        for route in &routes {
            hash.update(route.written.as_bytes());
            hash.update([0]);
        }
        let digest = hash.finalize();
        let digest = i64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
        Self { routes, digest }
    }

    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// Identifies the routes as configured: the store keeps it with each event, so the
    /// reconciler knows which events another configuration routed (during a rolling change
    /// of routes) and routes those again.
    pub fn digest(&self) -> i64 {
        self.digest
    }

    /// Every destination some route names, each once, in configuration order.
    pub fn destinations(&self) -> Vec<Name> {
        let mut names: Vec<Name> = Vec::new();
        for route in &self.routes {
            if !names.contains(&route.destination) {
                names.push(route.destination.clone());
            }
        }
        names
    }

    /// [`RouteTable::select`] for a stored event (a replay, the reconciler's repair): its
    /// stored headers, which hold credentials for hookgate itself redacted, as ingest also
    /// routes on them.
    pub fn select_stored(&self, event: &StoredEvent) -> Vec<Routed> {
        let headers: Vec<(&str, &str)> = event
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        self.select(&EventFacts {
            event_type: event.event_type.as_deref(),
            content_type: event.content_type.as_deref(),
            headers: &headers,
            body: &event.body,
        })
    }

    /// The destinations `event` goes to: one per destination whose routes it matches, with
    /// the delay of the first such route. The body is parsed only when a route's other
    /// conditions hold and it has a `match`.
    pub fn select(&self, event: &EventFacts<'_>) -> Vec<Routed> {
        let mut document = Document::Unread;
        let mut selected: Vec<Routed> = Vec::new();
        for route in &self.routes {
            if selected.iter().any(|r| r.destination == route.destination) {
                continue;
            }
            if route.matches(event, &mut document) {
                let ordering = route
                    .ordering
                    .as_ref()
                    .and_then(|o| o.key_of(event.headers, || document.get(event)));
                selected.push(Routed {
                    destination: route.destination.clone(),
                    delay: route.delay,
                    ordering,
                });
            }
        }
        selected
    }

    /// The ordering of a job that replays `event` to `destination`: that of the route that
    /// chooses the destination for the event today, or else of the first route to it that
    /// names an ordering key, so a replay named by hand joins its key's line too.
    pub fn ordering_for_stored(
        &self,
        event: &StoredEvent,
        destination: &str,
    ) -> Option<JobOrdering> {
        if let Some(r) = self
            .select_stored(event)
            .into_iter()
            .find(|r| r.destination.as_str() == destination)
        {
            return r.ordering;
        }
        let rule = self
            .routes
            .iter()
            .filter(|r| r.destination.as_str() == destination)
            .find_map(|r| r.ordering.as_ref())?;
        let headers: Vec<(&str, &str)> = event
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let facts = EventFacts {
            event_type: event.event_type.as_deref(),
            content_type: event.content_type.as_deref(),
            headers: &headers,
            body: &event.body,
        };
        let mut document = Document::Unread;
        rule.key_of(&headers, || document.get(&facts))
    }

    /// Whether some route names an ordering key (its jobs' keys depend on each event).
    pub fn is_ordered(&self) -> bool {
        self.routes.iter().any(|r| r.ordering.is_some())
    }

    /// The destinations some route of this table orders.
    pub fn ordered_destinations(&self) -> impl Iterator<Item = &Name> + '_ {
        self.routes
            .iter()
            .filter(|r| r.ordering.is_some())
            .map(|r| &r.destination)
    }
}
