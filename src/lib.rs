//! hookgate: a webhook ingestion gateway. The data path follows the module names:
//! `http` -> `verify` -> `ingest` -> `store` -> `queue` and `worker` -> `delivery`.

pub mod admin;
pub mod alerts;
pub mod cli;
pub mod cli_admin;
pub mod cli_listen;
pub mod cli_send;
pub mod config;
pub mod console;
pub mod delivery;
pub mod domain;
pub mod http;
pub mod ingest;
pub mod quarantine;
pub mod queue;
pub mod reconcile;
pub mod routing;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod verify;
pub mod worker;
