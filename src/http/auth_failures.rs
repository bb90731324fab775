//! Failed authentication per client address (admin API and console alike): a burst of
//! failures is allowed, then the address may fail only at a slow sustained rate, and is
//! answered 429 meanwhile, so a token cannot be guessed at network speed. A GCRA bucket per
//! address, kept as one timestamp: an address whose bucket has refilled is forgotten, and the
//! table holds at most `MAX_CLIENTS` addresses, so a flood of addresses cannot grow it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MAX_CLIENTS: usize = 10_000;

/// Whom a limit applies to: an IPv4 address, or an IPv6 /64 (one host's usual share).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Client(IpAddr);

impl Client {
    pub fn of(addr: Option<std::net::SocketAddr>) -> Self {
        match addr.map(|a| a.ip()) {
            Some(IpAddr::V6(v6)) => {
                let s = v6.segments();
                Self(IpAddr::V6(Ipv6Addr::new(
                    s[0], s[1], s[2], s[3], 0, 0, 0, 0,
                )))
            }
            Some(ip) => Self(ip),
            None => Self(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
        }
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Debug)]
pub struct AuthFailures {
    /// After the burst, one more failure per this interval.
    interval: Duration,
    /// How far ahead of the sustained rate a client may fail: the burst.
    tolerance: Duration,
    /// Per client: when its bucket is empty again (the theoretical arrival time).
    due: Mutex<HashMap<Client, Instant>>,
}

impl AuthFailures {
    /// `burst` failures at once, then one per `interval`.
    pub fn new(burst: u32, interval: Duration) -> Self {
        Self {
            interval,
            tolerance: interval * burst.max(1).saturating_sub(1),
            due: Mutex::default(),
        }
    }

    /// Before a credential is checked: `Err(wait)` while the client is out of tries.
    pub fn check(&self, client: Client, now: Instant) -> Result<(), Duration> {
        let due = self.due.lock().expect("auth failures lock");
        match due.get(&client) {
            Some(&tat) if tat.saturating_duration_since(now) > self.tolerance => {
                Err(tat.saturating_duration_since(now) - self.tolerance)
            }
            _ => Ok(()),
        }
    }

    /// After a credential was refused.
    pub fn failed(&self, client: Client, now: Instant) {
        let mut due = self.due.lock().expect("auth failures lock");
        if due.len() >= MAX_CLIENTS && !due.contains_key(&client) {
            due.retain(|_, tat| *tat > now);
            if due.len() >= MAX_CLIENTS {
                // Every tracked client is mid-burst: forget the one nearest to refilled.
                if let Some(oldest) = due.iter().min_by_key(|(_, tat)| **tat).map(|(c, _)| *c) {
                    due.remove(&oldest);
                }
            }
        }
        let tat = due.entry(client).or_insert(now);
        *tat = (*tat).max(now) + self.interval;
    }
}

/// Whole seconds for a `Retry-After` header, rounded up.
pub fn retry_after_seconds(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BURST: u32 = 20;
    const INTERVAL: Duration = Duration::from_secs(3);

    fn limits() -> AuthFailures {
        AuthFailures::new(BURST, INTERVAL)
    }

    fn client(last: u8) -> Client {
        Client::of(Some(([10, 0, 0, last], 1234).into()))
    }

    #[test]
    fn a_burst_of_failures_then_one_per_interval() {
        let limits = limits();
        let (a, t0) = (client(1), Instant::now());
        for _ in 0..BURST {
            assert!(limits.check(a, t0).is_ok());
            limits.failed(a, t0);
        }
        let wait = limits.check(a, t0).unwrap_err();
        assert!(wait > Duration::ZERO && wait <= INTERVAL, "{wait:?}");
        assert!(limits.check(client(2), t0).is_ok(), "another client");
        assert!(limits.check(a, t0 + INTERVAL).is_ok());
    }

    #[test]
    fn the_table_stays_bounded() {
        let limits = limits();
        let t0 = Instant::now();
        for i in 0..(MAX_CLIENTS as u32 + 50) {
            let c = Client::of(Some((std::net::Ipv4Addr::from(i), 1).into()));
            limits.failed(c, t0);
        }
        assert!(limits.due.lock().unwrap().len() <= MAX_CLIENTS);
    }

    #[test]
    fn ipv6_clients_are_counted_per_64() {
        let a: std::net::SocketAddr = "[2001:db8:1:2::1]:1".parse().unwrap();
        let b: std::net::SocketAddr = "[2001:db8:1:2:ffff::9]:1".parse().unwrap();
        let c: std::net::SocketAddr = "[2001:db8:1:3::1]:1".parse().unwrap();
        assert_eq!(Client::of(Some(a)), Client::of(Some(b)));
        assert_ne!(Client::of(Some(a)), Client::of(Some(c)));
    }
}
