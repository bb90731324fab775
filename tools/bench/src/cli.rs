//! The options every scenario command takes.

use std::path::PathBuf;

use clap::Args;

use crate::scenarios::signatures;

#[derive(Debug, Clone, Args)]
pub struct Common {
    /// Short runs and small sizes: a smoke check of every step, not comparable figures.
    #[arg(long)]
    pub quick: bool,
    /// The gateway binary (default: `hookgate` next to this binary).
    #[arg(long)]
    pub hookgate: Option<PathBuf>,
    /// An existing PostgreSQL server to use as it is, without a database name (e.g.
    /// postgres://postgres@127.0.0.1:5432). Default: a throwaway cluster of the suite's own,
    /// configured for production (see bench/README.md).
    #[arg(long)]
    pub pg: Option<String>,
    /// Leave the host's dirty-page writeback as it is. By default, with its own cluster, the
    /// suite sets `vm.dirty_background_bytes` as docs/OPERATIONS.md recommends for a
    /// database host, and restores it at the end.
    #[arg(long)]
    pub keep_host_writeback: bool,
    /// The gateway's `database.max_connections`.
    #[arg(long, default_value_t = 16)]
    pub pool: u32,
    /// The gateway's `worker.concurrency`. Large enough that the all-in-one scenarios
    /// measure the gateway rather than its cap on deliveries in flight: with 32, a busy
    /// machine's sink round trips bounded delivery, and new jobs the hand-off had no room
    /// for took the dearer queue path (docs/decisions/delivery-slots-bound-all-in-one.md).
    #[arg(long, default_value_t = 128)]
    pub worker_concurrency: usize,
    /// The sink destination's `max_in_flight` (as `--worker-concurrency`).
    #[arg(long, default_value_t = 128)]
    pub max_in_flight: usize,
    /// RUST_LOG for the gateway (its logs go to a file in the work directory).
    #[arg(long, default_value = "warn")]
    pub rust_log: String,
    /// Connections of the fixed-concurrency ingest runs.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Connections available to fixed-rate runs.
    #[arg(long, default_value_t = 64)]
    pub rate_connections: usize,
    /// `all` only: run just these scenarios (comma-separated) and merge them into the
    /// existing results file, keeping the others from the run that measured them.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Seconds of each measured ingest run (default 30, or 5 with --quick).
    #[arg(long)]
    pub seconds: Option<u64>,
    /// Webhook body size, bytes.
    #[arg(long, default_value_t = 512)]
    pub body_size: usize,
    /// Results file (default: bench/results/latest.json for `all`, quick.json with --quick,
    /// else bench/results/<scenario>.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Markdown table (default: bench/RESULTS.md for `all`, bench/results/quick.md with --quick).
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// `signatures`: stores to measure ingest on (comma-separated: sqlite, pg; none:
    /// verification alone).
    #[arg(long, value_delimiter = ',', default_value = "sqlite")]
    pub signature_stores: Vec<signatures::Store>,
    /// `signatures` and `partitions-gateway`: an earlier gateway binary whose ingest takes
    /// turns with this build's (`signatures`: HMAC, e.g. built from the commit before a
    /// change to verification; `partitions-gateway`: a build from b66f21d, before
    /// partitioning).
    #[arg(long)]
    pub baseline_hookgate: Option<PathBuf>,
    /// `signatures` and `partitions-gateway`: what to call the baseline in the results (e.g.
    /// its commit).
    #[arg(long, default_value = "baseline")]
    pub baseline_label: String,
    /// `signatures`: rounds of alternated segments (default 4, or 2 with --quick).
    #[arg(long)]
    pub signature_rounds: Option<usize>,
    /// `signatures`: requests per segment (default 120,000, or 20,000 with --quick).
    #[arg(long)]
    pub signature_requests: Option<usize>,
    /// `routes`: stores to measure on (comma-separated: sqlite, pg).
    #[arg(long, value_delimiter = ',', default_value = "sqlite,pg")]
    pub route_stores: Vec<signatures::Store>,
    /// `routes`: rounds of alternated segments (default 8, or 2 with --quick).
    #[arg(long)]
    pub route_rounds: Option<usize>,
    /// `routes`: requests per segment (default 60,000, or 20,000 with --quick).
    #[arg(long)]
    pub route_requests: Option<usize>,
    /// `quarantine-flood`: stores to measure on (comma-separated: sqlite, pg).
    #[arg(long, value_delimiter = ',', default_value = "sqlite,pg")]
    pub flood_stores: Vec<signatures::Store>,
    /// `quarantine-flood`: badly signed requests per second during the flood legs (above
    /// the source's admission, 64 requests/s, and the quarantine writer's pace, so their
    /// drops are exercised).
    #[arg(long, default_value_t = 2_000.0)]
    pub flood_rate: f64,
    /// `quarantine-flood`: rounds of alternated segments (default 6, or 2 with --quick).
    #[arg(long)]
    pub flood_rounds: Option<usize>,
    /// `quarantine-flood`: seconds per segment (default 10, or 3 with --quick).
    #[arg(long)]
    pub flood_seconds: Option<u64>,
    /// `partitions`: events stored over ten days for the retention and migration
    /// measurements (default 2,000,000, or 200,000 with --quick).
    #[arg(long)]
    pub events: Option<u64>,
    /// `topology`: rounds of one segment per topology (default 3, or 1 with --quick).
    #[arg(long)]
    pub topology_rounds: Option<usize>,
    /// `topology`: seconds of each run in a segment (default 6, or 3 with --quick).
    #[arg(long)]
    pub topology_seconds: Option<u64>,
    /// `topology`: the fixed rate of the latency runs, events/s (default: half the
    /// all-in-one's delivery rate in the first round).
    #[arg(long)]
    pub topology_rate: Option<f64>,
}
