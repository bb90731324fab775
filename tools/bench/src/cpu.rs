//! CPU time from /proc: a process's own (user and system, all threads) and the whole
//! machine's busy time, both in seconds. Linux reports them in USER_HZ ticks, 100 a second on
//! every mainstream architecture.

const TICKS_PER_S: f64 = 100.0;

/// CPU time process `pid` has used so far.
pub fn process_seconds(pid: u32) -> Option<f64> {
    stat_seconds(&format!("/proc/{pid}/stat"))
}

/// CPU time this process (the bench and its load generator) has used so far.
pub fn own_seconds() -> Option<f64> {
    stat_seconds("/proc/self/stat")
}

fn stat_seconds(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // After the command name in parentheses: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_S)
}

/// Busy CPU time of the whole machine so far (`/proc/stat`: all but idle and iowait).
pub fn machine_busy_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: f64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3).copied().unwrap_or(0.0) + ticks.get(4).copied().unwrap_or(0.0);
    (total - idle) / TICKS_PER_S
}
