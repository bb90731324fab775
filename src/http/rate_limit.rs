//! Per-source ingress rate limiting (GCRA: a token bucket kept as one timestamp).

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct RateLimiter {
    /// Time between requests at the sustained rate.
    interval: Duration,
    /// How far ahead of schedule requests may run: the burst.
    tolerance: Duration,
    /// The theoretical arrival time of the next request.
    next: Mutex<Instant>,
}

impl RateLimiter {
    /// `per_second` sustained, with bursts of up to `burst` requests.
    pub fn new(per_second: u32, burst: u32) -> Self {
        let interval = Duration::from_secs(1) / per_second.max(1);
        Self {
            interval,
            tolerance: interval * burst.max(1).saturating_sub(1),
            next: Mutex::new(Instant::now()),
        }
    }

    /// `Ok` to admit a request now, or how long until one would be admitted.
    pub fn check(&self, now: Instant) -> Result<(), Duration> {
        let mut next = self.next.lock().expect("rate limiter lock");
        let tat = (*next).max(now);
        let ahead = tat - now;
        if ahead > self.tolerance {
            return Err(ahead - self.tolerance);
        }
        *next = tat + self.interval;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_a_burst_then_the_sustained_rate() {
        let limiter = RateLimiter::new(10, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.check(t0).is_ok());
        }
        let wait = limiter.check(t0).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        assert!(limiter.check(t0 + Duration::from_millis(100)).is_ok());
        assert!(limiter.check(t0 + Duration::from_millis(100)).is_err());
        // After a quiet second the full burst is available again.
        let later = t0 + Duration::from_secs(2);
        for _ in 0..3 {
            assert!(limiter.check(later).is_ok());
        }
        assert!(limiter.check(later).is_err());
    }
}
