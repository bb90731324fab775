//! Local hand-off: in a process that both ingests and delivers, ingest claims a new job for
//! this process's workers in the transaction that creates it, and passes it over in memory
//! once that commits. The job costs no claim statement, no wake-up and no read of its event
//! back from the database, and its delivery starts at once.
//!
//! Only when the worker has a free slot for the destination and its last claim found no
//! backlog there: older due jobs go first, and under load everything goes through the
//! queue. The job is stored `in_progress` under a lease like any claimed job, so a crash
//! between the commit and the attempt's outcome is repaired the same way: the lease expires
//! and the reconciler returns the job to the queue.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

use crate::domain::{EventId, JobId};
use crate::store::{ClaimedJob, PreClaim};

/// The worker's side of the hand-off: its slots, and where handed-off jobs arrive. Cheap to
/// clone.
#[derive(Clone)]
pub struct Handoff {
    inner: Arc<Inner>,
}

struct Inner {
    /// Caps deliveries in flight in this process (shared with the claim loop).
    global: Arc<Semaphore>,
    per_destination: BTreeMap<String, Destination>,
    lease: chrono::Duration,
    /// Off until the worker runs, and again once it stops.
    open: AtomicBool,
    sender: mpsc::UnboundedSender<HandedOff>,
    receiver: Mutex<mpsc::UnboundedReceiver<HandedOff>>,
    arrived: Notify,
}

struct Destination {
    slots: Arc<Semaphore>,
    /// The claim loop's last look found fewer due jobs than it had room for.
    keeping_up: AtomicBool,
}

/// A job committed as claimed by this process, with the slots reserved for it.
pub struct HandedOff {
    pub job: ClaimedJob,
    pub permits: [OwnedSemaphorePermit; 2],
}

/// Slots held for one job ingest is about to create. Dropped without `dispatch` (the event
/// was a copy, or its batch failed), it gives them back.
pub struct Reservation {
    permits: [OwnedSemaphorePermit; 2],
    claim: PreClaim,
    handoff: Handoff,
}

impl Handoff {
    pub(crate) fn new(
        global: Arc<Semaphore>,
        per_destination: &BTreeMap<String, Arc<Semaphore>>,
        lease: chrono::Duration,
    ) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        let per_destination = per_destination
            .iter()
            .map(|(name, slots)| {
                let d = Destination {
                    slots: slots.clone(),
                    keeping_up: AtomicBool::new(false),
                };
                (name.clone(), d)
            })
            .collect();
        Self {
            inner: Arc::new(Inner {
                global,
                per_destination,
                lease,
                open: AtomicBool::new(false),
                sender,
                receiver: Mutex::new(receiver),
                arrived: Notify::new(),
            }),
        }
    }

    /// Slots for a new job to `destination`, if the worker is running, has one free, and
    /// found no backlog there at its last claim.
    pub fn reserve(
        &self,
        destination: &str,
        event: EventId,
        now: DateTime<Utc>,
    ) -> Option<Reservation> {
        let inner = &self.inner;
        let d = inner.per_destination.get(destination)?;
        if !inner.open.load(Ordering::Acquire) || !d.keeping_up.load(Ordering::Acquire) {
            return None;
        }
        let global = inner.global.clone().try_acquire_owned().ok()?;
        let local = d.slots.clone().try_acquire_owned().ok()?;
        Some(Reservation {
            permits: [global, local],
            claim: PreClaim {
                job_id: JobId::for_event(event),
                token: crate::domain::time_ordered_uuid(),
                locked_until: now + inner.lease,
            },
            handoff: self.clone(),
        })
    }

    /// The claim loop's finding for `destination`: whether the queue had no more due jobs
    /// than it had room for.
    pub(crate) fn set_keeping_up(&self, destination: &str, keeping_up: bool) {
        if let Some(d) = self.inner.per_destination.get(destination) {
            d.keeping_up.store(keeping_up, Ordering::Release);
        }
    }

    pub(crate) fn open(&self, open: bool) {
        self.inner.open.store(open, Ordering::Release);
    }

    /// Every job handed off and not yet taken.
    pub(crate) fn take(&self) -> Vec<HandedOff> {
        let mut receiver = self.inner.receiver.lock().expect("hand-off receiver");
        std::iter::from_fn(|| receiver.try_recv().ok()).collect()
    }

    /// Resolves when a job may have been handed off since the last `take`.
    pub(crate) async fn arrived(&self) {
        self.inner.arrived.notified().await;
    }
}

impl Reservation {
    pub fn claim(&self) -> PreClaim {
        self.claim
    }

    /// Passes the job, now committed under this reservation's claim, to the worker;
    /// `job` builds it from the claim.
    pub fn dispatch(self, job: impl FnOnce(PreClaim) -> ClaimedJob) {
        let Reservation {
            permits,
            claim,
            handoff,
        } = self;
        let job = job(claim);
        // The worker holds the receiver for as long as the handle lives.
        let _ = handoff.inner.sender.send(HandedOff { job, permits });
        handoff.inner.arrived.notify_one();
    }
}
