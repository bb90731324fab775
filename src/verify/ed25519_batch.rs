//! Ed25519 signatures of concurrent requests, checked together.
//!
//! One Ed25519 check costs as much CPU as the gateway spends on a whole HMAC-signed event.
//! Checked as a batch (`ed25519_dalek::verify_batch`: one multiscalar multiplication for all),
//! a signature costs about half as much once eight or more wait together, which under load
//! they do (docs/decisions/ed25519-verification-cost.md).
//!
//! No thread of its own: the first request on a thread to queue a signature leads. It yields
//! once, so that the other requests its HTTP worker has ready queue theirs, then checks every
//! signature its thread's queue holds, on its own worker, and answers the others. A request
//! that queues after that leads the next batch. Handing signatures to a thread of their own
//! and back costs each request two wake-ups, about a third of what the batch saves; one queue
//! for all workers would have one worker check while the other waits.
//!
//! The batch equation accepts every signature `verify_strict` accepts. Beyond those it can
//! accept only signatures that take the private key to make (a non-canonical or small-order
//! `R` the signer chose), never a forgery, given a key that is not of small order, which
//! `VerifyKey::public` refuses. A batch that fails is checked again signature by signature
//! with `verify_strict`, so one bad signature never fails a good request beside it; a flood
//! of bad signatures costs each about one and a half single checks.

use std::sync::{Arc, Mutex};

use ed25519_dalek::{Signature, VerifyingKey};
use tokio::sync::oneshot;

/// Signatures per batch at most. Per signature the cost falls to about half a single check
/// by 8 to 16 and rises slowly past 32; a larger batch also costs more to redo when it fails.
const MAX_BATCH: usize = 32;

/// One signature to check, and where its answer goes.
struct Item {
    key: VerifyingKey,
    message: Vec<u8>,
    signature: Signature,
    reply: oneshot::Sender<bool>,
}

/// Signatures waiting, and whether a request has taken on checking them.
#[derive(Default)]
struct Waiting {
    items: Vec<Item>,
    leader: bool,
}

/// The handle requests use; clones share the queues.
#[derive(Clone, Default)]
pub struct Ed25519Batch {
    waiting: Arc<[Mutex<Waiting>; SHARDS]>,
}

/// Queues of waiting signatures: each thread queues on its own (threads share them past this
/// many), so that each HTTP worker checks its own requests' batches.
const SHARDS: usize = 16;

fn shard() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

impl std::fmt::Debug for Ed25519Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ed25519Batch").finish_non_exhaustive()
    }
}

impl Ed25519Batch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `signature` is `key`'s over `message`, checked in a batch with the signatures
    /// of concurrent requests.
    pub async fn check(&self, key: &VerifyingKey, message: Vec<u8>, signature: Signature) -> bool {
        let (reply, answer) = oneshot::channel();
        // The queue is chosen once: a task that moves to another thread while it yields
        // (a multi-threaded runtime) still checks the queue it joined.
        let queue = &self.waiting[shard()];
        let lead = {
            let mut waiting = lock(queue);
            waiting.items.push(Item {
                key: *key,
                message,
                signature,
                reply,
            });
            !std::mem::replace(&mut waiting.leader, true)
        };
        if lead {
            // Checks what is waiting when dropped: after the yield, or when the request is
            // dropped during it (its client gone), so no signature is ever left waiting.
            let leader = Leader(queue);
            tokio::task::yield_now().await;
            drop(leader);
        }
        // Every queued signature is answered by the leader that takes it; a checking that
        // panicked is the only way to lose an answer, and then the request is refused.
        answer.await.unwrap_or(false)
    }
}

fn lock(waiting: &Mutex<Waiting>) -> std::sync::MutexGuard<'_, Waiting> {
    // Nothing panics while holding the lock: a poisoned one still holds consistent data.
    waiting.lock().unwrap_or_else(|e| e.into_inner())
}

/// The request that checks the signatures waiting when it is dropped.
struct Leader<'a>(&'a Mutex<Waiting>);

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        let items = {
            let mut waiting = lock(self.0);
            waiting.leader = false;
            std::mem::take(&mut waiting.items)
        };
        #[cfg(test)]
        BATCHES.with(|b| b.set(b.get() + items.len().div_ceil(MAX_BATCH)));
        let valid: Vec<bool> = items.chunks(MAX_BATCH).flat_map(check_all).collect();
        for (item, valid) in items.into_iter().zip(valid) {
            // A request that gave up waiting has dropped its receiver.
            let _ = item.reply.send(valid);
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Batches this thread has checked.
    static BATCHES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn check_one(item: &Item) -> bool {
    item.key
        .verify_strict(&item.message, &item.signature)
        .is_ok()
}

/// Each item's validity: the batch as a whole, then one by one if it fails.
fn check_all(items: &[Item]) -> Vec<bool> {
    if items.len() > 1 {
        let messages: Vec<&[u8]> = items.iter().map(|i| i.message.as_slice()).collect();
        let signatures: Vec<Signature> = items.iter().map(|i| i.signature).collect();
        let keys: Vec<VerifyingKey> = items.iter().map(|i| i.key).collect();
        if ed25519_dalek::verify_batch(&messages, &signatures, &keys).is_ok() {
            return vec![true; items.len()];
        }
    }
    items.iter().map(check_one).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer as _, SigningKey};
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn item(signer: &SigningKey, message: &[u8]) -> Item {
        Item {
            key: signer.verifying_key(),
            message: message.to_vec(),
            signature: signer.sign(message),
            reply: oneshot::channel().0,
        }
    }

    #[test]
    fn a_bad_signature_fails_alone_and_its_batch_neighbours_pass() {
        let (a, b) = (key(1), key(2));
        let mut items: Vec<Item> = (0..8u8)
            .map(|n| item(if n % 2 == 0 { &a } else { &b }, &[n; 40]))
            .collect();
        assert_eq!(check_all(&items), vec![true; 8]);
        // Signed by the other key, and a message changed after signing.
        items[3].key = a.verifying_key();
        items[5].message[0] ^= 1;
        let expected: Vec<bool> = (0..8).map(|n| n != 3 && n != 5).collect();
        assert_eq!(check_all(&items), expected);
    }

    #[test]
    fn a_batch_of_one_answers_for_its_own_signature() {
        let a = key(7);
        let mut one = item(&a, b"m");
        assert_eq!(check_all(std::slice::from_ref(&one)), vec![true]);
        one.message = b"n".to_vec();
        assert_eq!(check_all(std::slice::from_ref(&one)), vec![false]);
    }

    fn signed(signer: &SigningKey, n: u32, valid: bool) -> (Vec<u8>, Signature) {
        let message = n.to_be_bytes().to_vec();
        let mut signature = signer.sign(&message).to_bytes();
        if !valid {
            signature[40] ^= 1;
        }
        (message, Signature::from_bytes(&signature))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_checks_each_get_their_own_answer() {
        let batch = Ed25519Batch::new();
        let a = key(9);
        let public = a.verifying_key();
        let checks: Vec<_> = (0..200u32)
            .map(|n| {
                let batch = batch.clone();
                let (message, signature) = signed(&a, n, n % 7 != 0);
                tokio::spawn(async move { (n, batch.check(&public, message, signature).await) })
            })
            .collect();
        for check in checks {
            let (n, valid) = check.await.unwrap();
            assert_eq!(valid, n % 7 != 0, "check {n}");
        }
    }

    /// Requests ready together on one thread are checked as one batch: the leader's yield
    /// lets the others queue before it checks.
    #[tokio::test(flavor = "current_thread")]
    async fn requests_ready_together_share_one_batch() {
        let batch = Ed25519Batch::new();
        let a = key(11);
        let public = a.verifying_key();
        let checks = (0..10u32).map(|n| {
            let (message, signature) = signed(&a, n, true);
            let batch = &batch;
            async move { batch.check(&public, message, signature).await }
        });
        let before = BATCHES.with(|b| b.get());
        let answers = futures_util::future::join_all(checks).await;
        assert_eq!(answers, vec![true; 10]);
        assert_eq!(
            BATCHES.with(|b| b.get()) - before,
            1,
            "one batch for all ten"
        );
    }

    /// A leader whose request is dropped while it yields (its client gone) still checks the
    /// signatures queued behind it.
    #[test]
    fn a_leader_dropped_while_it_yields_still_answers_the_others() {
        let batch = Ed25519Batch::new();
        let a = key(13);
        let public = a.verifying_key();
        let mut cx = Context::from_waker(Waker::noop());
        let (m1, s1) = signed(&a, 1, true);
        let (m2, s2) = signed(&a, 2, true);
        let (m3, s3) = signed(&a, 3, false);
        let mut leader = Box::pin(batch.check(&public, m1, s1));
        let mut second = Box::pin(batch.check(&public, m2, s2));
        let mut third = Box::pin(batch.check(&public, m3, s3));
        // Polled outside a runtime, `yield_now` stays pending until polled again.
        assert!(leader.as_mut().poll(&mut cx).is_pending());
        assert!(second.as_mut().poll(&mut cx).is_pending());
        assert!(third.as_mut().poll(&mut cx).is_pending());
        drop(leader);
        assert_eq!(second.as_mut().poll(&mut cx), Poll::Ready(true));
        assert_eq!(third.as_mut().poll(&mut cx), Poll::Ready(false));
    }
}
