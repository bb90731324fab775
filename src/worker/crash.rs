//! Crash points: tests arm one to make a worker stop dead at an exact point of a delivery,
//! leaving the database as a killed process would (nothing more written). Unarmed, a check
//! is one uncontended mutex lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrashPoint {
    /// The claim has committed; nothing has been sent.
    AfterClaim,
    /// The destination has received the request; its answer is never looked at.
    AfterSend,
    /// The answer is classified; the outcome is not committed.
    BeforeOutcome,
    /// The reconciler has repaired one job and stops before the rest.
    ReconcileAfterRepair,
}

#[derive(Debug, Clone, Default)]
pub struct CrashPoints(Arc<Mutex<HashMap<CrashPoint, u32>>>);

impl CrashPoints {
    /// The next `times` passes through `point` crash.
    pub fn arm(&self, point: CrashPoint, times: u32) {
        self.0.lock().expect("crash point map").insert(point, times);
    }

    pub(crate) fn hit(&self, point: CrashPoint) -> bool {
        let mut map = self.0.lock().expect("crash point map");
        match map.get_mut(&point) {
            Some(n) if *n > 0 => {
                *n -= 1;
                tracing::warn!(?point, "crash point hit: abandoning work");
                true
            }
            _ => false,
        }
    }
}
