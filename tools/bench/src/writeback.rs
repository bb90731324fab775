//! The host's dirty-page writeback, which decides whether a write-heavy database sees
//! steady I/O or a burst. PostgreSQL 15 extends a table or index by writing zero pages
//! into the page cache; with Linux's default policy (`vm.dirty_background_ratio = 10`, a
//! 30 s expiry) about a gigabyte of them piles up and the flusher writes it in one go every
//! 30 s, and the WAL fsyncs of every commit queue behind it: 100–400 ms stalls (measured,
//! docs/decisions/host-writeback-4mb.md). docs/OPERATIONS.md recommends `vm.dirty_background_bytes = 4 MB` on
//! a database host; the suite applies that for its run when it owns the PostgreSQL cluster,
//! and puts the old value back when it ends.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

const BYTES: &str = "/proc/sys/vm/dirty_background_bytes";
const RATIO: &str = "/proc/sys/vm/dirty_background_ratio";

/// docs/OPERATIONS.md's value.
pub const RECOMMENDED_BYTES: u64 = 4 * 1024 * 1024;

/// What the run used, for the results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct WritebackSetup {
    /// e.g. `vm.dirty_background_bytes = 4 MB (set for this run; was dirty_background_ratio = 10)`.
    pub during_run: String,
}

/// The setting as found; puts it back when dropped if the run changed it.
pub struct HostWriteback {
    found: Option<Found>,
    /// True while the host holds the run's value; cleared by the one `restore` that undoes it.
    changed: AtomicBool,
    pub setup: WritebackSetup,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// `dirty_background_bytes` was set (non-zero): the ratio is ignored.
    Bytes(u64),
    /// `dirty_background_bytes` was 0: the ratio (percent of available memory) applies.
    Ratio(u64),
}

impl Found {
    fn read() -> Option<Found> {
        let bytes = read_u64(BYTES)?;
        if bytes > 0 {
            Some(Found::Bytes(bytes))
        } else {
            read_u64(RATIO).map(Found::Ratio)
        }
    }

    fn describe(self) -> String {
        match self {
            Found::Bytes(b) => format!("vm.dirty_background_bytes = {}", mb(b)),
            Found::Ratio(r) => format!("vm.dirty_background_ratio = {r}"),
        }
    }

    /// Writing one of the two makes the kernel zero the other.
    fn write(self) -> std::io::Result<()> {
        match self {
            Found::Bytes(b) => std::fs::write(BYTES, b.to_string()),
            Found::Ratio(r) => std::fs::write(RATIO, r.to_string()),
        }
    }
}

impl HostWriteback {
    /// Sets the recommended value when `apply` (leaving it alone if it already is, or if
    /// /proc/sys cannot be written); records what the run used either way.
    pub fn setup(apply: bool) -> HostWriteback {
        let found = Found::read();
        let Some(was) = found else {
            return HostWriteback {
                found,
                changed: AtomicBool::new(false),
                setup: WritebackSetup {
                    during_run: "unknown (no /proc/sys/vm)".into(),
                },
            };
        };
        let wanted = Found::Bytes(RECOMMENDED_BYTES);
        let (changed, during_run) = if !apply || was == wanted {
            (false, format!("{} (as found)", was.describe()))
        } else {
            match wanted.write() {
                Ok(()) => (
                    true,
                    format!(
                        "{} (set for this run; was {})",
                        wanted.describe(),
                        was.describe()
                    ),
                ),
                Err(e) => (
                    false,
                    format!(
                        "{} (as found; setting {} failed: {e})",
                        was.describe(),
                        mb(RECOMMENDED_BYTES)
                    ),
                ),
            }
        };
        println!("  host writeback: {during_run}");
        HostWriteback {
            found,
            changed: AtomicBool::new(changed),
            setup: WritebackSetup { during_run },
        }
    }

    /// Puts the found value back (also done on drop).
    pub fn restore(&self) {
        if let (true, Some(was)) = (self.changed.swap(false, Ordering::SeqCst), self.found) {
            if let Err(e) = was.write() {
                eprintln!("could not restore {}: {e}", was.describe());
            }
        }
    }
}

impl Drop for HostWriteback {
    fn drop(&mut self) {
        self.restore();
    }
}

fn read_u64(path: impl AsRef<Path>) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn mb(bytes: u64) -> String {
    format!("{} MB", bytes / (1024 * 1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test, so the two cases never run at once against the one host setting.
    #[test]
    fn leaves_the_host_alone_unless_asked_and_restores_what_it_changed() {
        let Some(before) = Found::read() else {
            return; // no /proc/sys/vm here: nothing to set or to check
        };
        let kept = HostWriteback::setup(false);
        assert_eq!(Found::read(), Some(before));
        assert_eq!(
            kept.setup.during_run,
            format!("{} (as found)", before.describe())
        );
        drop(kept);
        assert_eq!(Found::read(), Some(before));

        let applied = HostWriteback::setup(true);
        let during = Found::read();
        if applied.setup.during_run.contains("set for this run") {
            assert_eq!(during, Some(Found::Bytes(RECOMMENDED_BYTES)));
        } else {
            // Already the recommended value, or /proc/sys not writable (and it says so).
            assert_eq!(during, Some(before));
            if before != Found::Bytes(RECOMMENDED_BYTES) {
                assert!(
                    applied.setup.during_run.contains("failed"),
                    "{}",
                    applied.setup.during_run
                );
            }
        }
        applied.restore();
        assert_eq!(Found::read(), Some(before));
    }
}
