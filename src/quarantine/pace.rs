//! Token buckets that bound what a flood of refused requests costs: one per source at
//! admission (a flooded source cannot crowd the others out of the queue) and one for the
//! writer (its writes stay a small share of what the store can take, which valid ingest
//! needs).

use std::time::{Duration, Instant};

/// `rate` tokens a second, at most `burst` saved up.
#[derive(Debug, Clone)]
pub(super) struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    pub(super) fn full(rate: f64, burst: f64, now: Instant) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + earned).min(self.burst);
        self.at = now;
    }

    /// Takes one token if there is one.
    pub(super) fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Takes `n` tokens, and says how long to wait first when the bucket holds fewer (the
    /// bucket is then empty at the end of the wait).
    pub(super) fn take(&mut self, n: usize, now: Instant) -> Duration {
        self.refill(now);
        let short = n as f64 - self.tokens;
        if short <= 0.0 {
            self.tokens -= n as f64;
            return Duration::ZERO;
        }
        let wait = Duration::from_secs_f64(short / self.rate);
        self.tokens = 0.0;
        self.at = now + wait;
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::full(10.0, 3.0, t0);
        assert!((0..3).all(|_| b.try_take(t0)));
        assert!(!b.try_take(t0), "the burst is spent");
        assert!(
            b.try_take(t0 + Duration::from_millis(100)),
            "one token per 100 ms"
        );
        assert!(!b.try_take(t0 + Duration::from_millis(150)));
        assert!(
            b.try_take(t0 + Duration::from_secs(60)) && b.try_take(t0 + Duration::from_secs(60)),
            "refilled, but never past the burst"
        );
    }

    #[test]
    fn taking_more_than_the_bucket_holds_waits_for_the_rest() {
        let t0 = Instant::now();
        let mut b = Bucket::full(100.0, 50.0, t0);
        assert_eq!(b.take(30, t0), Duration::ZERO);
        assert_eq!(
            b.take(40, t0),
            Duration::from_millis(200),
            "20 left, 20 more at 100/s"
        );
        assert_eq!(
            b.take(10, t0 + Duration::from_millis(200)),
            Duration::from_millis(100)
        );
    }
}
