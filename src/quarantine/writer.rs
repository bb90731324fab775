//! The quarantine's writer: one task per process, storing what the queue holds in batches.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::Item;
use crate::config::QuarantineConfig;
use crate::store::{NewQuarantined, Store};
use crate::telemetry::Metrics;

/// Requests written in one transaction, at most.
const BATCH: usize = 128;
/// Requests written per second, at most, in bursts of up to a second's worth. Under a flood
/// the quarantine keeps a sample (the newest `max_per_source` survive either way), and its
/// writes stay a small share of what the store can take, which valid ingest needs; what
/// the queue cannot hold meanwhile is dropped and counted (`dropped_full`).
const ROWS_PER_SECOND: f64 = 1_280.0;

pub(super) async fn run(
    store: Store,
    config: QuarantineConfig,
    mut queue: mpsc::Receiver<Item>,
    queued_bytes: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
) {
    let mut batch: Vec<NewQuarantined> = Vec::with_capacity(BATCH);
    let mut flushes = Vec::new();
    let mut budget = Budget::new();
    while let Some(first) = queue.recv().await {
        let mut next = Some(first);
        while let Some(item) = next {
            match item {
                Item::Keep(row) => batch.push(*row),
                Item::Flush(done) => flushes.push(done),
            }
            next = if batch.len() < BATCH {
                queue.try_recv().ok()
            } else {
                None
            };
        }
        budget.take(batch.len()).await;
        write(&store, &config, &batch, &metrics).await;
        let bytes: usize = batch.iter().map(|r| r.body.len()).sum();
        queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
        batch.clear();
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}

/// A token bucket of rows: `take` waits until the bucket holds `n`.
struct Budget {
    rows: f64,
    at: tokio::time::Instant,
}

impl Budget {
    fn new() -> Self {
        Self {
            rows: ROWS_PER_SECOND,
            at: tokio::time::Instant::now(),
        }
    }

    async fn take(&mut self, n: usize) {
        let now = tokio::time::Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * ROWS_PER_SECOND;
        self.rows = (self.rows + refill).min(ROWS_PER_SECOND);
        self.at = now;
        let short = n as f64 - self.rows;
        if short > 0.0 {
            tokio::time::sleep(std::time::Duration::from_secs_f64(short / ROWS_PER_SECOND)).await;
            self.rows = 0.0;
            self.at = tokio::time::Instant::now();
        } else {
            self.rows -= n as f64;
        }
    }
}

async fn write(
    store: &Store,
    config: &QuarantineConfig,
    batch: &[NewQuarantined],
    metrics: &Metrics,
) {
    if batch.is_empty() {
        return;
    }
    let count = |source: &str, outcome: &str, n: u64| {
        metrics
            .quarantine
            .with_label_values(&[source, outcome])
            .inc_by(n);
    };
    match store
        .quarantine_requests(batch, config.max_per_source, config.max_bytes_per_source)
        .await
    {
        Ok(evicted) => {
            for row in batch {
                count(&row.source, "kept", 1);
            }
            for (source, n) in evicted {
                count(&source, "evicted", n);
            }
        }
        Err(e) => {
            // The requests were answered long ago; the quarantine is a second chance, not
            // a promise, so a failed write is counted and logged, never retried in a loop.
            tracing::warn!(error = %e, requests = batch.len(), "could not keep rejected requests");
            for row in batch {
                count(&row.source, "write_failed", 1);
            }
        }
    }
}
