//! Group commit: concurrent callers share transactions. A writer task takes every item
//! waiting (up to a batch size), writes them with one call, and answers each caller only
//! after that call returns. With nothing else waiting, a batch is just one item: no caller
//! waits for a batch to fill. Ingest uses it for events, workers for delivery outcomes.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Mutex, Notify, RwLock};

use super::StoreError;

type Reply<R> = oneshot::Sender<Result<R, Arc<StoreError>>>;

struct Shared<T, R> {
    receiver: Mutex<mpsc::Receiver<(T, Reply<R>)>>,
    /// Tests hold this to let items pile up into one batch.
    gate: RwLock<()>,
    submitted: AtomicU64,
    /// Signalled at a submission while someone waits for one (`submitted_at_least`, which
    /// tests use); the count keeps that signal off the path of every other submission.
    queued: Notify,
    queue_watchers: AtomicUsize,
    batches: AtomicU64,
    /// Writers whose batch is being written now, and a signal each time one finishes.
    writing: AtomicUsize,
    finished: Notify,
}

/// How the writer tasks form their batches. The default: each writer writes what is waiting
/// at once, whatever the others are doing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pacing {
    /// Each batch waits up to this long after its first item for more, until it is full. For
    /// writes whose callers can wait: fewer, larger statements cost the database less per item.
    pub linger: Duration,
    /// With several writers: a writer with items waits while another writer's batch is in
    /// flight, up to this long, and then writes everything waiting at once. So the writers
    /// take turns and each batch holds what arrived during the last one. Where a statement
    /// costs the database more than the sync after it, larger batches raise what it can take
    /// (measured; see docs/decisions/). A batch that takes longer, such as one waiting on a
    /// lock or a slow sync, is relieved: the next writer goes ahead without it.
    pub relieve_after: Option<Duration>,
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
        Self::start_paced(writers, max_batch, Pacing::default(), write)
    }

    /// As `start`, with batches formed as `pacing` says.
    pub fn start_paced<W, F>(writers: usize, max_batch: usize, pacing: Pacing, write: W) -> Self
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
            queued: Notify::new(),
            queue_watchers: AtomicUsize::new(0),
            batches: AtomicU64::new(0),
            writing: AtomicUsize::new(0),
            finished: Notify::new(),
        });
        let write = Arc::new(write);
        for _ in 0..writers {
            tokio::spawn(write_batches(
                shared.clone(),
                max_batch,
                pacing,
                write.clone(),
            ));
        }
        Self { sender, shared }
    }

    /// Queues the item and waits until its batch has been written (or failed).
    pub async fn submit(&self, item: T) -> Result<R, Arc<StoreError>> {
        let stopped = || Arc::new(StoreError::Corrupt("group commit writers stopped".into()));
        let (reply, answer) = oneshot::channel();
        if self.sender.send((item, reply)).await.is_err() {
            return Err(stopped());
        }
        self.shared.submitted.fetch_add(1, Ordering::SeqCst);
        if self.shared.queue_watchers.load(Ordering::SeqCst) > 0 {
            self.shared.queued.notify_waiters();
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Items submitted (queued for a writer) so far.
    pub fn submitted(&self) -> u64 {
        self.shared.submitted.load(Ordering::SeqCst)
    }

    /// Returns once `n` items in all have been submitted.
    pub async fn submitted_at_least(&self, n: u64) {
        struct Watching<'a>(&'a AtomicUsize);
        impl Drop for Watching<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.shared.queue_watchers.fetch_add(1, Ordering::SeqCst);
        let _watching = Watching(&self.shared.queue_watchers);
        loop {
            let queued = self.shared.queued.notified();
            tokio::pin!(queued);
            // Registered before the count is read, so a submission in between still wakes it.
            queued.as_mut().enable();
            if self.submitted() >= n {
                return;
            }
            queued.await;
        }
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
    pacing: Pacing,
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
            if let Some(relieve_after) = pacing.relieve_after {
                wait_for_writing_batch(&shared, relieve_after).await;
            }
            // Everything already waiting, then (with a window) what arrives within it.
            let linger = pacing.linger;
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
        shared.writing.fetch_add(1, Ordering::SeqCst);
        let result = write(items).await;
        shared.writing.fetch_sub(1, Ordering::SeqCst);
        shared.finished.notify_waiters();
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

/// Returns once no other writer's batch is in flight, or after `limit`.
async fn wait_for_writing_batch<T, R>(shared: &Shared<T, R>, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let finished = shared.finished.notified();
        tokio::pin!(finished);
        // Registered before the check, so a batch that ends in between still wakes us.
        finished.as_mut().enable();
        if shared.writing.load(Ordering::SeqCst) == 0 {
            return;
        }
        if tokio::time::timeout_at(deadline, finished).await.is_err() {
            return;
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
        let pacing = Pacing {
            linger,
            ..Pacing::default()
        };
        GroupCommit::start_paced(1, 8, pacing, |batch: Vec<u32>| async move {
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

    /// Sizes of the batches, in the order they began.
    type BatchLog = Arc<std::sync::Mutex<Vec<usize>>>;

    /// Two relieving writers; the batch holding item 0 stays in flight until `release` is
    /// notified, every other batch is written at once. Each item is answered with its batch's
    /// size, and `started` lists the sizes of the batches in the order they began.
    fn relieving_with_a_slow_first_batch(
        relieve_after: Duration,
    ) -> (GroupCommit<u32, usize>, Arc<Notify>, BatchLog) {
        let release = Arc::new(Notify::new());
        let started = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (r, st) = (release.clone(), started.clone());
        let pacing = Pacing {
            relieve_after: Some(relieve_after),
            ..Pacing::default()
        };
        let commit = GroupCommit::start_paced(2, 8, pacing, move |batch: Vec<u32>| {
            let (release, started) = (r.clone(), st.clone());
            async move {
                started.lock().unwrap().push(batch.len());
                if batch.contains(&0) {
                    release.notified().await;
                }
                Ok(vec![batch.len(); batch.len()])
            }
        });
        (commit, release, started)
    }

    #[tokio::test(start_paused = true)]
    async fn relieving_writers_take_turns_and_the_next_batch_holds_all_that_waited() {
        let (commit, release, started) = relieving_with_a_slow_first_batch(Duration::from_secs(1));
        let first = spawn_submit(&commit, 0);
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Items arriving one by one while the first batch is in flight: the idle writer
        // waits for it rather than writing each on its own.
        let mut later = Vec::new();
        for i in 1..=3 {
            later.push(spawn_submit(&commit, i));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(*started.lock().unwrap(), vec![1]);
        release.notify_one();
        assert_eq!(first.await.unwrap(), 1);
        for s in later {
            assert_eq!(s.await.unwrap(), 3);
        }
        assert_eq!(*started.lock().unwrap(), vec![1, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_in_flight_too_long_is_relieved_by_the_next_writer() {
        let (commit, release, started) =
            relieving_with_a_slow_first_batch(Duration::from_millis(50));
        let stuck = spawn_submit(&commit, 0);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let t0 = tokio::time::Instant::now();
        // Bounded, so a writer that never relieves fails the test instead of hanging it.
        let relieved = tokio::time::timeout(Duration::from_secs(1), commit.submit(1)).await;
        assert_eq!(relieved.expect("never relieved").unwrap(), 1);
        let waited = t0.elapsed();
        assert!(
            waited >= Duration::from_millis(50) && waited < Duration::from_millis(60),
            "waited {waited:?}"
        );
        assert_eq!(*started.lock().unwrap(), vec![1, 1]);
        assert!(!stuck.is_finished());
        release.notify_one();
        assert_eq!(stuck.await.unwrap(), 1);
    }
}
