//! Domain newtypes. Each is built only through `parse`, so a value that exists is valid.

use std::fmt;

use uuid::Uuid;

/// A new time-ordered id (UUIDv7: milliseconds since the epoch, a 12-bit counter, then 62
/// random bits). Ids made in this process sort in the order they were made, even within one
/// millisecond: a job's attempts are listed by id, and without the counter two outcomes
/// recorded in the same millisecond could be listed in either order. The counter is RFC
/// 9562's fixed-length counter in `rand_a`; past 4,096 ids in one millisecond it carries
/// into the next. Ids must be unique, not secret, so the random bits come from a fast
/// per-thread generator instead of the OS, which costs a system call per id, several per
/// ingested event.
pub fn time_ordered_uuid() -> Uuid {
    use std::sync::atomic::{AtomicU64, Ordering};
    /// The last id's milliseconds and counter, as `millis << 12 | counter`.
    static LAST: AtomicU64 = AtomicU64::new(0);
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| {
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX >> 12)
        });
    let first_of_this_millisecond = millis << 12;
    let next = |last: u64| first_of_this_millisecond.max(last + 1);
    let last = LAST
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
            Some(next(last))
        })
        .unwrap_or_else(|last| last);
    let stamp = next(last);
    let mut bytes = [0u8; 10];
    bytes[..2].copy_from_slice(&((stamp & 0xFFF) as u16).to_be_bytes());
    fastrand::fill(&mut bytes[2..]);
    uuid::Builder::from_unix_timestamp_millis(stamp >> 12, &bytes).into_uuid()
}

/// hookgate's own id for a stored event. Time-ordered (UUIDv7) so that ids sort by arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(Uuid);

impl EventId {
    pub fn generate() -> Self {
        Self(time_ordered_uuid())
    }

    pub fn from_uuid(id: Uuid) -> Self {
        Self(id)
    }

    pub fn parse(s: &str) -> Result<Self, DomainError> {
        Uuid::parse_str(s)
            .map(Self)
            .map_err(|_| DomainError::new("event id", "is not a UUID"))
    }

    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Id of a queued delivery job (one per event and destination).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JobId(Uuid);

impl JobId {
    /// A new id for a job of `event`: a UUIDv7 with the event id's milliseconds and random
    /// bits of its own. PostgreSQL partitions jobs by id with the events' time ranges, so a
    /// job (a replay's included) lives in its event's partition, is found by id in that
    /// partition alone, and goes when its event's partition goes.
    pub fn for_event(event: EventId) -> Self {
        let millis = event.as_uuid().get_timestamp().map_or(0, |t| {
            let (secs, nanos) = t.to_unix();
            secs * 1000 + u64::from(nanos) / 1_000_000
        });
        let mut random = [0u8; 10];
        fastrand::fill(&mut random);
        Self(uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid())
    }

    pub fn from_uuid(id: Uuid) -> Self {
        Self(id)
    }

    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The provider's own id for an event: the dedupe key, unique per source.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProviderEventId(String);

impl ProviderEventId {
    pub const MAX_LEN: usize = 255;

    pub fn parse(s: &str) -> Result<Self, DomainError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(DomainError::new("provider event id", "is empty"));
        }
        if s.len() > Self::MAX_LEN {
            return Err(DomainError::new(
                "provider event id",
                "is longer than 255 bytes",
            ));
        }
        if s.chars().any(char::is_control) {
            return Err(DomainError::new(
                "provider event id",
                "contains control characters",
            ));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProviderEventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A name usable in a URL path segment: sources, destinations, tenants.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(String);

impl Name {
    pub fn parse(what: &'static str, s: &str) -> Result<Self, DomainError> {
        let valid = !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if valid {
            Ok(Self(s.to_owned()))
        } else {
            Err(DomainError::new(
                what,
                "must be 1 to 64 characters of a-z, 0-9, '-' or '_'",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {problem}")]
pub struct DomainError {
    what: &'static str,
    problem: &'static str,
}

impl DomainError {
    fn new(what: &'static str, problem: &'static str) -> Self {
        Self { what, problem }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_event_id_rejects_empty_long_and_control() {
        assert!(ProviderEventId::parse("  ").is_err());
        assert!(ProviderEventId::parse(&"a".repeat(256)).is_err());
        assert!(ProviderEventId::parse("a\nb").is_err());
        assert_eq!(ProviderEventId::parse(" evt_1 ").unwrap().as_str(), "evt_1");
    }

    #[test]
    fn names_are_path_safe() {
        assert!(Name::parse("source", "stripe-live_2").is_ok());
        for bad in ["", "../etc", "Stripe", "a b", "a/b", &"x".repeat(65)] {
            assert!(Name::parse("source", bad).is_err(), "{bad:?} accepted");
        }
    }
}

#[cfg(test)]
mod uuid_tests {
    use super::*;

    #[test]
    fn time_ordered_uuids_are_version_7_and_each_sorts_after_the_one_before() {
        let ids: Vec<Uuid> = (0..10_000).map(|_| time_ordered_uuid()).collect();
        assert!(ids.iter().all(|u| u.get_version_num() == 7));
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
        let millis = |u: &Uuid| u.get_timestamp().map(|t| t.to_unix()).unwrap();
        let within_a_millisecond = ids.windows(2).filter(|w| millis(&w[0]) == millis(&w[1]));
        assert!(
            within_a_millisecond.count() > 0,
            "the counter was exercised"
        );
    }

    #[test]
    fn ids_made_on_several_threads_at_once_are_all_distinct_and_ordered_per_thread() {
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..5_000).map(|_| time_ordered_uuid()).collect()))
            .collect();
        let per_thread: Vec<Vec<Uuid>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        for ids in &per_thread {
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
        }
        let all: std::collections::HashSet<_> = per_thread.iter().flatten().collect();
        assert_eq!(all.len(), 20_000);
    }
}
