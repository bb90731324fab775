//! How many of a destination's due jobs a claim round may take: none while it is paused or
//! tripped (but for a tripped one's probe), and no more than its free slots and, for a
//! rate-limited one, the tokens this round took from the shared bucket.

use chrono::{DateTime, Utc};
use tokio::sync::Semaphore;

use super::Worker;
use crate::config::RateLimit;
use crate::store::{Hold, StoreError};

/// A destination's verdict for this round.
pub(super) enum Gate {
    /// Claim nothing.
    Skip,
    /// No free slot: not a backlog by itself (ingest's hand-off may hold the slots).
    OutOfRoom,
    /// A rate-limited destination without a token: the next is due then.
    NoToken(Option<DateTime<Utc>>),
    /// Claim up to `room` jobs; `rate`'s unused tokens go back afterwards; `hand_off` says
    /// whether ingest may hand this destination's new jobs to this process.
    Claim {
        room: usize,
        rate: Option<RateLimit>,
        hand_off: bool,
    },
}

impl Worker {
    pub(super) async fn gate(
        &self,
        name: &str,
        slots: &Semaphore,
        holds: &[Hold],
        now: DateTime<Utc>,
    ) -> Result<Gate, StoreError> {
        let destination = self.config.destinations.get(name);
        let mut limit = usize::MAX;
        if let Some(hold) = holds.iter().find(|h| h.destination == name) {
            match (hold.paused, destination.and_then(|d| d.circuit)) {
                (true, _) => return Ok(Gate::Skip),
                // Tripped: one probe per cool-down, in all processes together.
                (false, Some(c)) if hold.probe_at.is_some_and(|t| t <= now) => {
                    if slots.available_permits() == 0
                        || !self.queue.take_probe(name, now, c.cool_down).await?
                    {
                        return Ok(Gate::Skip);
                    }
                    limit = 1;
                }
                (false, Some(_)) => return Ok(Gate::Skip),
                // Tripped, but the destination no longer has a breaker: not held.
                (false, None) => {}
            }
        }
        let room = slots
            .available_permits()
            .min(self.global.available_permits())
            .min(limit);
        if room == 0 {
            return Ok(Gate::OutOfRoom);
        }
        let rate = destination.and_then(|d| d.rate_limit);
        let Some(rate) = rate else {
            return Ok(Gate::Claim {
                room,
                rate: None,
                hand_off: limit == usize::MAX,
            });
        };
        // Ingest's hand-off would skip the shared bucket: every job of a rate-limited
        // destination goes through the queue.
        let (granted, next) = self.queue.take_tokens(name, room, rate, now).await?;
        if granted == 0 {
            return Ok(Gate::NoToken(next));
        }
        Ok(Gate::Claim {
            room: granted,
            rate: Some(rate),
            hand_off: false,
        })
    }
}
