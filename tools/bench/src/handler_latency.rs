//! The gateway's own view of a run's ingest latency: its `hookgate_ingest_duration_seconds`
//! histogram, read from `/metrics` before and after the run. The loadgen times each request
//! from when it was due, so its tail also holds whatever kept a request from reaching the
//! handler: the loadgen itself, the kernel, a machine short of CPU. The histogram times each
//! request inside the handler. Side by side, the two tell how much of a tail is the gateway's
//! (bench/RESULTS.md, "What limits each figure").

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::http1::Conn;

const HISTOGRAM: &str = "hookgate_ingest_duration_seconds";

/// Requests a run's gateway answered, and how many of them took longer than the
/// histogram's 10 ms and 25 ms bounds inside the handler.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HandlerLatency {
    pub requests: u64,
    pub over_10ms: u64,
    pub over_25ms: u64,
}

impl HandlerLatency {
    /// The share of requests over 10 ms in the handler, in percent.
    pub fn over_10ms_pct(&self) -> f64 {
        if self.requests == 0 {
            return 0.0;
        }
        self.over_10ms as f64 * 100.0 / self.requests as f64
    }

    pub fn line(&self) -> String {
        format!(
            "in the handler ({HISTOGRAM}): {} of {} requests over 10 ms ({:.2} %), {} over 25 ms",
            self.over_10ms,
            self.requests,
            self.over_10ms_pct(),
            self.over_25ms
        )
    }
}

/// The histogram's totals at one moment, summed over its sources.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    count: u64,
    within_10ms: u64,
    within_25ms: u64,
}

impl Snapshot {
    /// What the gateway answered between `before` and this snapshot.
    pub fn since(&self, before: &Snapshot) -> HandlerLatency {
        let requests = self.count.saturating_sub(before.count);
        let within = |now: u64, then: u64| now.saturating_sub(then);
        HandlerLatency {
            requests,
            over_10ms: requests.saturating_sub(within(self.within_10ms, before.within_10ms)),
            over_25ms: requests.saturating_sub(within(self.within_25ms, before.within_25ms)),
        }
    }
}

/// Reads the gateway's `/metrics` once.
pub async fn snapshot(addr: SocketAddr) -> anyhow::Result<Snapshot> {
    let mut conn = Conn::connect(addr).await?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let response = conn.round_trip(request.as_bytes(), true).await?;
    anyhow::ensure!(
        response.status == 200,
        "GET /metrics answered {}",
        response.status
    );
    Ok(parse(&String::from_utf8_lossy(&response.body)))
}

/// Prometheus text format: `name{labels} value` per line.
fn parse(text: &str) -> Snapshot {
    let mut s = Snapshot::default();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let value = value as u64;
        let Some(rest) = series.strip_prefix(HISTOGRAM) else {
            continue;
        };
        if rest.starts_with("_count") {
            s.count += value;
        } else if rest.starts_with("_bucket") {
            if rest.contains("le=\"0.01\"") {
                s.within_10ms += value;
            } else if rest.contains("le=\"0.025\"") {
                s.within_25ms += value;
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "\
# TYPE hookgate_ingest_duration_seconds histogram
hookgate_ingest_duration_seconds_bucket{source=\"github\",le=\"0.005\"} 90
hookgate_ingest_duration_seconds_bucket{source=\"github\",le=\"0.01\"} 95
hookgate_ingest_duration_seconds_bucket{source=\"github\",le=\"0.025\"} 99
hookgate_ingest_duration_seconds_bucket{source=\"github\",le=\"+Inf\"} 100
hookgate_ingest_duration_seconds_count{source=\"github\"} 100
hookgate_ingest_duration_seconds_bucket{source=\"stripe\",le=\"0.01\"} 50
hookgate_ingest_duration_seconds_bucket{source=\"stripe\",le=\"0.025\"} 50
hookgate_ingest_duration_seconds_count{source=\"stripe\"} 50
hookgate_ingest_requests_total{source=\"stripe\"} 999
";

    const AFTER: &str = "\
hookgate_ingest_duration_seconds_bucket{source=\"github\",le=\"0.01\"} 1090
hookgate_ingest_duration_seconds_bucket{source=\"github\",le=\"0.025\"} 1097
hookgate_ingest_duration_seconds_count{source=\"github\"} 1100
hookgate_ingest_duration_seconds_bucket{source=\"stripe\",le=\"0.01\"} 1040
hookgate_ingest_duration_seconds_bucket{source=\"stripe\",le=\"0.025\"} 1050
hookgate_ingest_duration_seconds_count{source=\"stripe\"} 1050
";

    #[test]
    fn counts_what_the_run_added_over_each_bound_across_sources() {
        let run = parse(AFTER).since(&parse(BEFORE));
        assert_eq!(
            run,
            HandlerLatency {
                requests: 2_000,
                over_10ms: 2_000 - (995 + 990),
                over_25ms: 2_000 - (998 + 1_000),
            }
        );
        assert!((run.over_10ms_pct() - 0.75).abs() < 1e-9);
    }

    #[test]
    fn other_metrics_are_not_counted() {
        let s = parse("hookgate_ingest_requests_total{source=\"stripe\"} 999\n");
        assert_eq!(s, Snapshot::default());
    }
}
