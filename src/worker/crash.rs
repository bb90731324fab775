//! Crash points: tests arm one to make a worker stop dead at an exact point of a delivery,
//! leaving the database as a killed process would (nothing more written), or hold one to
//! keep a live delivery waiting there. Unarmed, a check is one uncontended mutex lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrashPoint {
    /// The claim has committed; nothing has been sent.
    AfterClaim,
    /// The destination has received the request; its answer is never looked at.
    AfterSend,
    /// The answer is classified; the outcome is not committed.
    BeforeOutcome,
    /// An outcome write failed for a reason a retry may get past; it is tried again next.
    OutcomeRetry,
    /// The reconciler has repaired one job and stops before the rest.
    ReconcileAfterRepair,
}

/// A delivery held at a point: it says when it gets there, and waits to be let go.
#[derive(Debug, Default)]
pub struct Hold {
    pub reached: Notify,
    pub release: Notify,
}

#[derive(Debug, Default)]
struct Armed {
    crashes: HashMap<CrashPoint, u32>,
    holds: HashMap<CrashPoint, Arc<Hold>>,
}

#[derive(Debug, Clone, Default)]
pub struct CrashPoints(Arc<Mutex<Armed>>);

impl CrashPoints {
    /// The next `times` passes through `point` crash.
    pub fn arm(&self, point: CrashPoint, times: u32) {
        let mut armed = self.0.lock().expect("crash point map");
        armed.crashes.insert(point, times);
    }

    /// The next pass through `point` waits there, alive, until `release.notify_one()`.
    pub fn hold(&self, point: CrashPoint) -> Arc<Hold> {
        let hold = Arc::new(Hold::default());
        let mut armed = self.0.lock().expect("crash point map");
        armed.holds.insert(point, hold.clone());
        hold
    }

    pub(crate) fn hit(&self, point: CrashPoint) -> bool {
        let mut armed = self.0.lock().expect("crash point map");
        match armed.crashes.get_mut(&point) {
            Some(n) if *n > 0 => {
                *n -= 1;
                tracing::warn!(?point, "crash point hit: abandoning work");
                true
            }
            _ => false,
        }
    }

    /// Waits at `point` if a hold is armed there.
    pub(crate) async fn pass(&self, point: CrashPoint) {
        let hold = self.0.lock().expect("crash point map").holds.remove(&point);
        if let Some(hold) = hold {
            hold.reached.notify_one();
            hold.release.notified().await;
        }
    }
}
