//! Integration tests: the real server on port 0, against SQLite and PostgreSQL alike.
//! Every test here runs once per backend (see `both_backends!`).

use hookgate_testkit as support;
use hookgate_testkit::both_backends;

mod admin;
mod alerts;
mod brokers;
mod bulk;
mod circuit;
mod concurrency;
mod console_sessions;
mod crash;
mod delivery;
mod derived_ids;
mod destinations;
mod group_commit;
mod handoff;
mod handshakes;
mod hardening;
mod idempotency;
mod ingest;
mod limits;
mod metrics;
mod missing_jobs;
mod ordered;
mod ordered_claim;
mod ordered_processes;
mod outage;
mod partitions;
mod pools;
mod quarantine;
mod rate_limit;
mod read_replica;
mod reconciliation;
mod reconciliation_app;
mod retention;
mod routing;
mod security;
mod store_conformance;
mod undelivered;
mod unstorable;
mod worker_crash;
