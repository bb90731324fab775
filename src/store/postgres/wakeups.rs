//! PostgreSQL: the workers' wake-up, sent after the commit that queued jobs (ingest's, or an
//! admin replay's or retry's) rather than inside it.
//!
//! `NOTIFY` takes one lock for the whole cluster at commit (`PreCommit_Notify`) and holds
//! it until the commit is flushed, so that notifications queue in commit order. Sent from
//! ingest's own statement, it made each ingest commit that queued a job wait for the
//! previous such commit's WAL flush before it could write its own commit record: concurrent
//! batches, from this process or any other gateway on the database, could not share a flush.
//!
//! Sent after the commit, by a task of its own on a connection that does not wait for the
//! flush (`synchronous_commit = off`; a wake-up lost in a crash costs nothing the poll does
//! not make up), the lock is held for the time it takes to queue one notification. One wake-up
//! is in flight at a time, and the batches that commit meanwhile are folded into the next:
//! a woken worker claims every due job, however many batches queued them.
//!
//! A wake-up follows its batch's commit, so a worker it wakes sees the batch's jobs. If the
//! process dies between the two, or the wake-up fails, only the wake-up is lost: the jobs are
//! durable and pending, and workers find them at their next poll (`worker.poll_interval`;
//! docs/FAILURE-STORY.md, W6).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};

use sqlx::{PgConnection, Postgres};
use tokio::sync::Notify;

use super::JOBS_CHANNEL;
use crate::store::held::HeldConnections;

#[derive(Debug)]
pub struct JobWakeups {
    /// The delivery bookkeeping's connections (`synchronous_commit = off`, so the wake-up's
    /// own commit does not wait for a flush), shared rather than one held for wake-ups
    /// alone: a pool sized for the worker has no connection to spare.
    relaxed: Arc<HeldConnections<Postgres>>,
    requested: Notify,
    started: Once,
    closing: AtomicBool,
}

impl JobWakeups {
    pub fn new(relaxed: Arc<HeldConnections<Postgres>>) -> Arc<Self> {
        Arc::new(Self {
            relaxed,
            requested: Notify::new(),
            started: Once::new(),
            closing: AtomicBool::new(false),
        })
    }

    /// Asks for a wake-up of every listening worker. Call it only after the commit of the
    /// jobs it is for. Returns at once; the wake-up is sent by a task of its own.
    pub fn wake(self: &Arc<Self>) {
        if self.closing.load(Ordering::Acquire) {
            return;
        }
        self.started.call_once(|| {
            tokio::spawn(send_wakeups(Arc::clone(self)));
        });
        // Stores one permit if the task is busy: any number of requests meanwhile make one
        // more wake-up.
        self.requested.notify_one();
    }

    /// Ends the task after the wake-up it may be sending.
    pub fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.requested.notify_one();
    }
}

async fn send_wakeups(wakeups: Arc<JobWakeups>) {
    loop {
        wakeups.requested.notified().await;
        if wakeups.closing.load(Ordering::Acquire) {
            return;
        }
        let sent = wakeups
            .relaxed
            .run(async |conn: &mut PgConnection| {
                sqlx::query("SELECT pg_notify($1, '')")
                    .bind(JOBS_CHANNEL)
                    .execute(conn)
                    .await
            })
            .await;
        if let Err(e) = sent {
            tracing::warn!(error = %e, "job wake-up not sent; workers find the jobs at their next poll");
        }
    }
}
