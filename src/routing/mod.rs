//! Routing: which destinations an event goes to. A route names its event types with
//! [`EventTypePattern`]s and may require a body [`Filter`] (`match`) and a header filter
//! (`match_headers`); both are compiled when the configuration is loaded. The language is
//! described in docs/ROUTING.md.

mod compile;
mod eval;
mod filter;
mod glob;
mod ordering;
mod route;

#[cfg(test)]
mod doc_examples;
#[cfg(test)]
mod tests;

pub use filter::{Filter, FilterError, MAX_FILTER_DEPTH, MAX_FILTER_NODES};
pub use glob::EventTypePattern;
pub use ordering::{bounded_key, JobOrdering, KeyLocation, OrderingRule, MAX_STORED_KEY};
pub use route::{EventFacts, Route, RouteTable, Routed, MAX_ROUTE_DELAY};
