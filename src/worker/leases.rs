//! The leases of every job a process is delivering, kept by one task: every third of a
//! lease it renews them all in one statement (`Store::renew_leases`). A lease is kept from
//! the claim until the outcome commits, so the jobs whose outcomes wait on a busy pool are
//! kept too; one statement per interval, whatever their number, is what keeps those
//! renewals from taking the connections the outcome writer is waiting for.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use tokio::sync::watch;
use uuid::Uuid;

use crate::domain::JobId;
use crate::queue::{lease_span, JobQueue};
use crate::store::ClaimedJob;

type Held = Arc<Mutex<HashMap<JobId, Uuid>>>;

pub(super) struct LeaseKeeper {
    held: Held,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseKeeper {
    /// Starts the renewing task; call inside the runtime. `rounds` counts the renewal
    /// statements that committed.
    pub fn start(queue: JobQueue, lease: Duration, rounds: watch::Sender<u64>) -> Self {
        let held = Held::default();
        let task = tokio::spawn(renew_every_third(queue, lease, held.clone(), rounds));
        Self { held, task }
    }

    /// Keeps `job`'s lease until the returned guard is dropped.
    pub fn keep(&self, job: &ClaimedJob) -> Kept {
        lock(&self.held).insert(job.job_id, job.claim_token);
        Kept {
            held: self.held.clone(),
            job: job.job_id,
            token: job.claim_token,
        }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A job whose lease is kept; dropping it stops (however the delivery ends, a crash
/// point's abandonment included).
pub(super) struct Kept {
    held: Held,
    job: JobId,
    token: Uuid,
}

impl Drop for Kept {
    fn drop(&mut self) {
        let mut held = lock(&self.held);
        if held.get(&self.job) == Some(&self.token) {
            held.remove(&self.job);
        }
    }
}

fn lock(held: &Held) -> std::sync::MutexGuard<'_, HashMap<JobId, Uuid>> {
    // Inserts and removes only: a poisoned map is still consistent.
    held.lock().unwrap_or_else(|e| e.into_inner())
}

async fn renew_every_third(
    queue: JobQueue,
    lease: Duration,
    held: Held,
    rounds: watch::Sender<u64>,
) {
    let span = lease_span(lease);
    loop {
        tokio::time::sleep(lease / 3).await;
        let leases: Vec<(JobId, Uuid)> = lock(&held).iter().map(|(j, t)| (*j, *t)).collect();
        if leases.is_empty() {
            continue;
        }
        match queue.renew_all(&leases, Utc::now() + span).await {
            Ok(renewed) => {
                // A claim that is lost (or whose outcome committed meanwhile) has nothing
                // left to renew.
                let renewed: HashSet<JobId> = renewed.into_iter().collect();
                let mut held = lock(&held);
                for (job, token) in leases.iter().filter(|(j, _)| !renewed.contains(j)) {
                    if held.get(job) == Some(token) {
                        held.remove(job);
                    }
                }
                drop(held);
                rounds.send_modify(|n| *n += 1);
            }
            Err(e) => {
                tracing::warn!(jobs = leases.len(), error = %e, "lease renewal failed")
            }
        }
    }
}
