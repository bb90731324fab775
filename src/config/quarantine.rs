//! `[quarantine]`: requests to a known source that failed verification, kept for re-verification.

use std::time::Duration;

use serde::Deserialize;

use super::validate::{duration, invalid};
use super::ConfigError;

/// `[quarantine]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuarantineSettings {
    /// Keep rejected requests at all.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// The most requests kept per source; the oldest go first.
    #[serde(default = "default_max_per_source")]
    pub max_per_source: i64,
    /// The most body bytes kept per source; the oldest go first.
    #[serde(default = "default_max_bytes_per_source")]
    pub max_bytes_per_source: i64,
    /// How long a rejected request is kept.
    #[serde(default = "default_retention")]
    pub retention: String,
}

impl Default for QuarantineSettings {
    fn default() -> Self {
        Self {
            enabled: default_enabled(),
            max_per_source: default_max_per_source(),
            max_bytes_per_source: default_max_bytes_per_source(),
            retention: default_retention(),
        }
    }
}

fn default_enabled() -> bool {
    true
}
fn default_max_per_source() -> i64 {
    1_000
}
fn default_max_bytes_per_source() -> i64 {
    64 * 1024 * 1024
}
fn default_retention() -> String {
    "7d".into()
}

/// `[quarantine]` as it means.
#[derive(Debug, Clone)]
pub struct QuarantineConfig {
    pub enabled: bool,
    pub max_per_source: i64,
    pub max_bytes_per_source: i64,
    pub retention: Duration,
}

impl QuarantineConfig {
    pub(super) fn from_settings(s: &QuarantineSettings) -> Result<Self, ConfigError> {
        if s.max_per_source <= 0 {
            return Err(invalid("quarantine.max_per_source", "must be positive"));
        }
        if s.max_bytes_per_source <= 0 {
            return Err(invalid(
                "quarantine.max_bytes_per_source",
                "must be positive",
            ));
        }
        let retention = duration("quarantine.retention", &s.retention)?;
        if retention.is_zero() {
            return Err(invalid("quarantine.retention", "must be positive"));
        }
        Ok(Self {
            enabled: s.enabled,
            max_per_source: s.max_per_source,
            max_bytes_per_source: s.max_bytes_per_source,
            retention,
        })
    }
}
