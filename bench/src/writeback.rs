//! The host's dirty-page writeback, which decides whether a write-heavy database sees
//! steady I/O or a burst. PostgreSQL 15 extends a table or index by writing zero pages
//! into the page cache; with Linux's default policy (`vm.dirty_background_ratio = 10`, a
//! 30 s expiry) about a gigabyte of them piles up and the flusher writes it in one go every
//! 30 s, and the WAL fsyncs of every commit queue behind it: 100–400 ms stalls (measured,
//! bench/RESULTS.md). docs/OPERATIONS.md recommends `vm.dirty_background_bytes = 16 MB` on
//! a database host; the suite applies that for its run when it owns the PostgreSQL cluster,
//! and puts the old value back when it ends.

use std::path::Path;

use serde::{Deserialize, Serialize};

const BYTES: &str = "/proc/sys/vm/dirty_background_bytes";
const RATIO: &str = "/proc/sys/vm/dirty_background_ratio";

/// docs/OPERATIONS.md's value.
pub const RECOMMENDED_BYTES: u64 = 16 * 1024 * 1024;

/// What the run used, for the results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct WritebackSetup {
    /// e.g. `vm.dirty_background_bytes = 16 MB (set for this run; was dirty_background_ratio = 10)`.
    pub during_run: String,
}

/// The setting as found; puts it back when dropped if the run changed it.
pub struct HostWriteback {
    found: Option<Found>,
    changed: bool,
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
                changed: false,
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
            changed,
            setup: WritebackSetup { during_run },
        }
    }

    /// Puts the found value back (also done on drop).
    pub fn restore(&mut self) {
        if let (true, Some(was)) = (self.changed, self.found) {
            if let Err(e) = was.write() {
                eprintln!("could not restore {}: {e}", was.describe());
            }
            self.changed = false;
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
