//! Group commit: concurrent callers share transactions. A writer task takes every item
//! waiting (up to a batch size), writes them with one call, and answers each caller only
//! after that call returns. With nothing else waiting, a batch is just one item: no caller
//! waits for a batch to fill. Ingest uses it for events, workers for delivery outcomes.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Mutex, RwLock};

use super::StoreError;

type Reply<R> = oneshot::Sender<Result<R, Arc<StoreError>>>;

struct Shared<T, R> {
    receiver: Mutex<mpsc::Receiver<(T, Reply<R>)>>,
    /// Tests hold this to let items pile up into one batch.
    gate: RwLock<()>,
    submitted: AtomicU64,
    batches: AtomicU64,
}

/// Handle to the writer tasks; cheap to clone.
pub struct GroupCommit<T, R> {
    sender: mpsc::Sender<(T, Reply<R>)>,
    shared: Arc<Shared<T, R>>,
}

impl<T, R> Clone for GroupCommit<T, R> {
    fn clone(&self) -> Self {
        Self {
            sender: self.sender.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<T: Send + 'static, R: Send + 'static> GroupCommit<T, R> {
    /// Starts `writers` tasks (batches in flight at once), each writing up to `max_batch`
    /// items per call to `write`, which must answer one `R` per item, in order. Must be
    /// called inside a tokio runtime.
    pub fn start<W, F>(writers: usize, max_batch: usize, write: W) -> Self
    where
        W: Fn(Vec<T>) -> F + Send + Sync + 'static,
        F: Future<Output = Result<Vec<R>, StoreError>> + Send + 'static,
    {
        Self::start_lingering(writers, max_batch, Duration::ZERO, write)
    }

    /// As `start`, but each batch waits up to `linger` after its first item for more, until
    /// it is full. For writes whose callers can wait: fewer, larger statements cost the
    /// database less per item.
    pub fn start_lingering<W, F>(
        writers: usize,
        max_batch: usize,
        linger: Duration,
        write: W,
    ) -> Self
    where
        W: Fn(Vec<T>) -> F + Send + Sync + 'static,
        F: Future<Output = Result<Vec<R>, StoreError>> + Send + 'static,
    {
        let max_batch = max_batch.max(1);
        let writers = writers.max(1);
        // Bounded so a stalled store pushes back on callers instead of piling up memory.
        let (sender, receiver) = mpsc::channel((max_batch * writers).max(64) * 4);
        let shared = Arc::new(Shared {
            receiver: Mutex::new(receiver),
            gate: RwLock::new(()),
            submitted: AtomicU64::new(0),
            batches: AtomicU64::new(0),
        });
        let write = Arc::new(write);
        for _ in 0..writers {
            tokio::spawn(write_batches(
                shared.clone(),
                max_batch,
                linger,
                write.clone(),
            ));
        }
        Self { sender, shared }
    }

    /// Queues the item and waits until its batch has been written (or failed).
    pub async fn submit(&self, item: T) -> Result<R, Arc<StoreError>> {
        let stopped = || Arc::new(StoreError::Corrupt("group commit writers stopped".into()));
        let (reply, answer) = oneshot::channel();
        self.shared.submitted.fetch_add(1, Ordering::SeqCst);
        if self.sender.send((item, reply)).await.is_err() {
            return Err(stopped());
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Items submitted so far.
    pub fn submitted(&self) -> u64 {
        self.shared.submitted.load(Ordering::SeqCst)
    }

    /// Batches written or failed so far.
    pub fn batches(&self) -> u64 {
        self.shared.batches.load(Ordering::SeqCst)
    }

    /// While the guard lives, no new batch starts: items queue up (tests use this to put
    /// several items in one batch).
    pub async fn hold(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.shared.gate.write().await
    }
}

async fn write_batches<T, R, W, F>(
    shared: Arc<Shared<T, R>>,
    max_batch: usize,
    linger: Duration,
    write: Arc<W>,
) where
    W: Fn(Vec<T>) -> F,
    F: Future<Output = Result<Vec<R>, StoreError>>,
{
    loop {
        let mut items = Vec::with_capacity(max_batch);
        let mut replies = Vec::with_capacity(max_batch);
        let guard = {
            let mut receiver = shared.receiver.lock().await;
            let Some((item, reply)) = receiver.recv().await else {
                return;
            };
            items.push(item);
            replies.push(reply);
            // Waiting here (not before `recv`) keeps one gatherer holding the queue, so
            // everything sent while the gate is held lands in the same batch.
            let guard = shared.gate.read().await;
            // Everything already waiting, then (with a window) what arrives within it.
            let deadline = (!linger.is_zero()).then(|| tokio::time::Instant::now() + linger);
            while items.len() < max_batch {
                let next = match (receiver.try_recv(), deadline) {
                    (Ok(next), _) => Some(next),
                    (Err(_), None) => None,
                    (Err(_), Some(deadline)) => tokio::time::timeout_at(deadline, receiver.recv())
                        .await
                        .ok()
                        .flatten(),
                };
                let Some((item, reply)) = next else { break };
                items.push(item);
                replies.push(reply);
            }
            guard
        };
        let size = items.len();
        let result = write(items).await;
        drop(guard);
        shared.batches.fetch_add(1, Ordering::SeqCst);
        match result {
            Ok(answers) if answers.len() == size => {
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answer));
                }
            }
            Ok(answers) => {
                let e = Arc::new(StoreError::Corrupt(format!(
                    "a batch of {size} got {} answers",
                    answers.len()
                )));
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, size, "batch write failed; failing each caller in it");
                let e = Arc::new(e);
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Submits from a task of its own, so the test can go on while the item waits.
    fn spawn_submit(commit: &GroupCommit<u32, usize>, item: u32) -> tokio::task::JoinHandle<usize> {
        let commit = commit.clone();
        tokio::spawn(async move { commit.submit(item).await.unwrap() })
    }

    /// A writer that answers each item with the size of the batch it came in.
    fn batch_sizes(linger: Duration) -> GroupCommit<u32, usize> {
        GroupCommit::start_lingering(1, 8, linger, |batch: Vec<u32>| async move {
            Ok(vec![batch.len(); batch.len()])
        })
    }

    /// The sizes of the batches that took two items submitted 20 ms apart.
    async fn two_items_20ms_apart(commit: &GroupCommit<u32, usize>) -> (usize, usize) {
        let first = spawn_submit(commit, 1);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = commit.submit(2).await.unwrap();
        (first.await.unwrap(), second)
    }

    // The clock is paused: time moves only when every task waits, so the gaps are exact.
    #[tokio::test(start_paused = true)]
    async fn a_lingering_batch_takes_items_that_arrive_within_its_window() {
        let commit = batch_sizes(Duration::from_millis(50));
        assert_eq!(two_items_20ms_apart(&commit).await, (2, 2));
        assert_eq!(commit.batches(), 1);

        // After the window, an item waits for the next batch.
        let third = spawn_submit(&commit, 3);
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert_eq!(commit.submit(4).await.unwrap(), 1);
        assert_eq!(third.await.unwrap(), 1);
        assert_eq!(commit.batches(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_window_no_item_waits_for_another() {
        let commit = batch_sizes(Duration::ZERO);
        assert_eq!(two_items_20ms_apart(&commit).await, (1, 1));
        assert_eq!(commit.batches(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_does_not_wait_out_its_window() {
        let commit = batch_sizes(Duration::from_secs(3600));
        let submits: Vec<_> = (0..8).map(|i| spawn_submit(&commit, i)).collect();
        let started = tokio::time::Instant::now();
        for s in submits {
            assert_eq!(s.await.unwrap(), 8);
        }
        assert!(started.elapsed() < Duration::from_secs(3600));
    }
}
