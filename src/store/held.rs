//! Connections that ingest keeps between batches instead of returning them to the pool.
//!
//! sqlx tests a connection with a round trip to the database each time it goes back to the
//! pool (and, by default, again when it is taken out). For a batch that is one statement,
//! that doubles or triples the round trips and wakes the server's backend for nothing. A
//! connection kept here goes back to the pool only when it may be broken, or at close.

use std::sync::Mutex;

use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool};

use super::{is_transient, StoreError};

/// An error after which a connection may no longer work.
pub trait MayBreakConnection: From<sqlx::Error> {
    fn may_break_connection(&self) -> bool;
}

impl MayBreakConnection for sqlx::Error {
    fn may_break_connection(&self) -> bool {
        match self {
            // A terminated backend answers with an error of its own (57P01) before closing.
            sqlx::Error::Database(e) => is_transient(e.code().as_deref()),
            _ => true,
        }
    }
}

impl MayBreakConnection for StoreError {
    fn may_break_connection(&self) -> bool {
        match self {
            StoreError::Unavailable(e) | StoreError::Database(e) => e.may_break_connection(),
            StoreError::Migrate(_) | StoreError::Corrupt(_) | StoreError::Unstorable(_) => false,
        }
    }
}

pub struct HeldConnections<DB: Database> {
    pool: Pool<DB>,
    /// `None` once closed: a connection finishing its call then goes back to the pool, so
    /// that closing the pool does not wait for a connection parked here.
    idle: Mutex<Option<Vec<PoolConnection<DB>>>>,
}

impl<DB: Database> std::fmt::Debug for HeldConnections<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldConnections").finish_non_exhaustive()
    }
}

impl<DB: Database> HeldConnections<DB> {
    pub fn new(pool: Pool<DB>) -> Self {
        Self {
            pool,
            idle: Mutex::new(Some(Vec::new())),
        }
    }

    /// Runs `op` on a held connection, or on one taken from the pool when none is free. The
    /// connection is kept afterwards unless `op` failed for a reason other than the
    /// database refusing a statement (I/O, protocol, the server shutting the session down,
    /// any error a retry may get past). Then it may be broken, and so may the
    /// others (a server restart or a network cut breaks them all): every held connection
    /// goes back to the pool, which tests each one and closes it if it is broken, so the
    /// next call after an outage does not meet a dead connection.
    pub async fn run<R, E: MayBreakConnection>(
        &self,
        op: impl AsyncFnOnce(&mut DB::Connection) -> Result<R, E>,
    ) -> Result<R, E> {
        let held = self.lock().as_mut().and_then(Vec::pop);
        let mut conn = match held {
            Some(c) => c,
            None => self.pool.acquire().await.map_err(E::from)?,
        };
        let result = op(&mut *conn).await;
        let sound = match &result {
            Ok(_) => true,
            Err(e) => !e.may_break_connection(),
        };
        // Dropping a pool connection only hands it to a task of the pool's: no waiting here.
        match self.lock().as_mut() {
            Some(idle) if sound => idle.push(conn),
            Some(idle) => idle.clear(),
            None => {}
        }
        result
    }

    /// Gives every held connection back to the pool; later calls return theirs at once.
    /// Call before closing the pool.
    pub fn release_all(&self) {
        let idle = self.lock().take();
        drop(idle);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<PoolConnection<DB>>>> {
        // A panic while holding this lock cannot leave the list inconsistent (a push or a
        // pop), so a poisoned lock is still usable.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
}
