//! Hostile input: bad requests, each with its exact answer, and the store checked to hold
//! nothing except where a case is accepted by design (each such case says why).
//!
//! Every test runs once on SQLite and once on PostgreSQL (see `both_backends!`), as
//! `<theme>::sqlite::<test>` and `<theme>::postgres::<test>`. Requests an HTTP client library
//! refuses to send (CR/LF in values, smuggling framings, slow clients) are written byte for
//! byte on a raw `TcpStream`. One test binary; a module per theme.

use hookgate_testkit as support;

mod common;

mod admin;
mod bodies;
mod headers;
mod key_schemes;
mod requests;
mod signatures;
mod slow_clients;
