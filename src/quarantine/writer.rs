//! The quarantine's writer: one task per process, storing what the queue holds in batches.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use std::time::Instant;

use tokio::sync::mpsc;

use super::pace::Bucket;

use super::Item;
use crate::config::QuarantineConfig;
use crate::store::{NewQuarantined, Store};
use crate::telemetry::Metrics;

/// Requests written in one transaction, at most.
const BATCH: usize = 128;
/// Requests written per second by one process, at most, in bursts of up to `WRITE_BURST`.
/// Under a flood the quarantine keeps a sample (the newest `max_per_source` survive either
/// way), so writing faster buys nothing; measured with the bench's `quarantine-flood`
/// (docs/decisions/quarantine-writer-pacing.md).
const WRITE_RATE: f64 = 256.0;
const WRITE_BURST: f64 = 1_024.0;
/// How long the writer gathers requests before it writes them.
const WINDOW: std::time::Duration = std::time::Duration::from_millis(500);

pub(super) async fn run(
    store: Store,
    config: QuarantineConfig,
    mut queue: mpsc::Receiver<Item>,
    queued_bytes: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
) {
    let mut batch: Vec<NewQuarantined> = Vec::with_capacity(BATCH);
    let mut flushes = Vec::new();
    let mut budget = Bucket::full(WRITE_RATE, WRITE_BURST, Instant::now());
    while let Some(first) = queue.recv().await {
        // Gather for up to `WINDOW` (or a full batch, or a flush): one commit for what a
        // trickle brings, rather than one per request. On SQLite every commit takes the
        // single write turn and a sync that ingest's commits wait behind.
        let until = tokio::time::Instant::now() + WINDOW;
        let mut next = Some(first);
        while let Some(item) = next {
            match item {
                Item::Keep(row) => batch.push(*row),
                Item::Flush(done) => flushes.push(done),
            }
            next = if batch.len() < BATCH && flushes.is_empty() {
                tokio::time::timeout_at(until, queue.recv())
                    .await
                    .ok()
                    .flatten()
            } else {
                None
            };
        }
        let wait = budget.take(batch.len(), Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        write(&store, &config, &batch, &metrics).await;
        let bytes: usize = batch.iter().map(|r| r.body.len()).sum();
        queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
        batch.clear();
        for done in flushes.drain(..) {
            let _ = done.send(());
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
