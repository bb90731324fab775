//! Prometheus metrics. Each `Application` has its own registry (so tests can check exact
//! counts); gauges that describe the database are computed when `/metrics` is scraped.

use prometheus::core::{Collector, Desc, Describer as _};
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::ingest::IngestBatcher;
use crate::store::{Store, StoreError};

pub struct Metrics {
    registry: Registry,
    /// Ingest requests by source and outcome (accepted, duplicate, rejected) and reason.
    pub ingest_requests: IntCounterVec,
    pub ingest_duration: HistogramVec,
    pub delivery_attempts: IntCounterVec,
    pub delivery_duration: HistogramVec,
    pub reconciler_repairs: IntCounterVec,
    /// Rejected requests by source and what became of them in the quarantine.
    pub quarantine: IntCounterVec,
    /// Reconciliation against providers' APIs, by source and kind (listed, missing,
    /// recovered, errors).
    pub reconciliation: IntCounterVec,
    jobs: IntGaugeVec,
    delivery_lag: prometheus::Gauge,
    pool: IntGaugeVec,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry =
            Registry::new_custom(Some("hookgate".into()), None).expect("a static prefix is valid");
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let histogram = |name: &str, help: &str, labels: &[&str]| {
            let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
            let h = HistogramVec::new(opts, labels).expect("valid metric");
            registry
                .register(Box::new(h.clone()))
                .expect("unique metric");
            h
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(g.clone()))
                .expect("unique metric");
            g
        };
        let delivery_lag = prometheus::Gauge::new(
            "delivery_lag_seconds",
            "Age of the oldest due pending job (0 when none is due)",
        )
        .expect("valid metric");
        registry
            .register(Box::new(delivery_lag.clone()))
            .expect("unique metric");
        Self {
            ingest_requests: counter(
                "ingest_requests_total",
                "Ingest requests by source, outcome (accepted, duplicate, rejected) and reason",
                &["source", "outcome", "reason"],
            ),
            ingest_duration: histogram(
                "ingest_duration_seconds",
                "Time from request to answer on the ingest endpoint",
                &["source"],
            ),
            delivery_attempts: counter(
                "delivery_attempts_total",
                "Delivery attempts by destination and outcome",
                &["destination", "outcome"],
            ),
            delivery_duration: histogram(
                "delivery_duration_seconds",
                "Duration of delivery attempts",
                &["destination"],
            ),
            reconciler_repairs: counter(
                "reconciler_repairs_total",
                "Jobs repaired by the reconciler, by kind",
                &["kind"],
            ),
            quarantine: counter(
                "quarantine_requests_total",
                "Rejected requests by source and what the quarantine did with them (kept, \
                 dropped_rate, dropped_full, dropped_too_large, write_failed, evicted, ingested, \
                 still_rejected, discarded)",
                &["source", "outcome"],
            ),
            reconciliation: counter(
                "reconciliation_total",
                "Reconciliation against providers' APIs: events listed, missing, recovered, and errors, by source",
                &["source", "kind"],
            ),
            jobs: gauge(
                "jobs",
                "Jobs by status and destination",
                &["status", "destination"],
            ),
            delivery_lag,
            pool: gauge(
                "db_pool_connections",
                "Database pool connections by state (idle, in_use, max)",
                &["state"],
            ),
            registry,
        }
        .with_known_series()
    }

    /// Series that should read 0 rather than be absent before their first event, so that
    /// alerts on them work from the start.
    fn with_known_series(self) -> Self {
        for kind in ["expired_lease", "missing_job"] {
            self.reconciler_repairs.with_label_values(&[kind]);
        }
        self
    }

    /// Also exposes the ingest batcher's own counts of events and batches.
    pub fn counting_batches_of(self, batcher: IngestBatcher) -> Self {
        self.registry
            .register(Box::new(GroupCommitCounts::new(batcher)))
            .expect("unique metric");
        self
    }

    /// The text exposition, with the database gauges and the batcher's counts read now.
    pub async fn render(&self, store: &Store) -> Result<String, StoreError> {
        self.jobs.reset();
        for (status, destination, n) in store.count_jobs_by_status().await? {
            self.jobs.with_label_values(&[&status, &destination]).set(n);
        }
        self.delivery_lag
            .set(store.delivery_lag(chrono::Utc::now()).await?.as_secs_f64());
        let (size, idle, max) = store.pool_usage();
        self.pool.with_label_values(&["idle"]).set(idle as i64);
        self.pool
            .with_label_values(&["in_use"])
            .set((size as usize).saturating_sub(idle) as i64);
        self.pool.with_label_values(&["max"]).set(max as i64);
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("encoding to a Vec cannot fail");
        Ok(String::from_utf8(out).expect("the text format is UTF-8"))
    }
}

/// Group commit's counters, read from the batcher at each scrape (it counts them anyway):
/// verified events handed to it and transactions (batches) that wrote them, so
/// rate(events) / rate(batches) is the mean batch size.
struct GroupCommitCounts {
    batcher: IngestBatcher,
    events: Opts,
    batches: Opts,
    descs: Vec<Desc>,
}

impl GroupCommitCounts {
    fn new(batcher: IngestBatcher) -> Self {
        let events = Opts::new(
            "ingest_batched_events_total",
            "Events submitted to ingest's group commit",
        );
        let batches = Opts::new(
            "ingest_batches_total",
            "Ingest transactions (group-commit batches) written or failed",
        );
        let descs = [&events, &batches]
            .into_iter()
            .map(|o| o.describe().expect("valid metric"))
            .collect();
        Self {
            batcher,
            events,
            batches,
            descs,
        }
    }
}

impl Collector for GroupCommitCounts {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        [
            (&self.events, self.batcher.submitted()),
            (&self.batches, self.batcher.batches()),
        ]
        .into_iter()
        .flat_map(|(opts, n)| {
            let counter = IntCounter::with_opts(opts.clone()).expect("valid metric");
            counter.inc_by(n);
            counter.collect()
        })
        .collect()
    }
}
