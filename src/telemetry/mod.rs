//! Logging setup (filter with `RUST_LOG`, default `info`) and metrics.

mod metrics;

pub use metrics::Metrics;

use std::io::IsTerminal as _;
use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// The format chosen by the first `init`, for what the process prints outside `tracing`.
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Installs the global subscriber once; later calls (tests) are ignored. Text logs are
/// coloured only when stderr is a terminal.
pub fn init(format: LogFormat) {
    if FORMAT.set(format).is_err() {
        return;
    }
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Whether the process prints JSON lines (set by `init`).
pub fn json_output() -> bool {
    FORMAT.get() == Some(&LogFormat::Json)
}

/// One line in the shape of a JSON log line, for what the process prints outside `tracing`.
pub fn json_line(level: &str, fields: serde_json::Value) -> String {
    serde_json::json!({
        "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "level": level,
        "fields": fields,
        "target": "hookgate",
    })
    .to_string()
}

/// An error and its causes, each cause once: a cause whose text the message already
/// carries (an error that prints its source) is not repeated.
pub fn error_chain(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}

/// Prints a fatal error on stderr: `error: ...`, or a JSON line in JSON mode.
pub fn print_error(error: &anyhow::Error) {
    let message = error_chain(error);
    if json_output() {
        eprintln!(
            "{}",
            json_line("ERROR", serde_json::json!({ "message": message }))
        );
    } else {
        eprintln!("error: {message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_chain_names_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address already in use");
        let e =
            anyhow::Error::new(io).context("cannot listen on 127.0.0.1:1: Address already in use");
        assert_eq!(
            error_chain(&e),
            "cannot listen on 127.0.0.1:1: Address already in use"
        );
        let e = anyhow::anyhow!("root cause").context("outer");
        assert_eq!(error_chain(&e), "outer: root cause");
    }
}
