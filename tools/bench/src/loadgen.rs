//! The load generator: signed webhooks with unique event ids, at a fixed concurrency
//! (closed loop: N connections each sending back to back) or at a fixed rate (open loop:
//! request i is due at start + i/rate; its latency counts from that due time whenever the
//! generator was behind, so a stalled server cannot hide its stall: no coordinated omission).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::http1::Conn;
use crate::payload::{answer_id, build_request, event_id, SourceSpec};
use crate::stats::{LatencySummary, Samples};

#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// N connections, each sending its next request as soon as the last one is answered.
    Concurrency(usize),
    /// An open-loop schedule of `per_sec` requests a second over up to `connections`.
    Rate { per_sec: f64, connections: usize },
}

/// Which provider event ids the requests carry: request i carries id number `offset + i`
/// (`payload::event_id`), unique and spread over the key space.
#[derive(Debug, Clone, Copy)]
pub enum Ids {
    /// Id number `offset + i` for request i: every event is new (with a random offset, so
    /// runs never collide).
    Fresh { offset: u64 },
    /// Id number `offset + k` for a random k in `0..count`: with the `offset` of an earlier
    /// fresh run and no more than it stored, every event is a duplicate.
    Existing { offset: u64, count: u64 },
}

impl Ids {
    pub fn fresh() -> Self {
        Self::Fresh {
            offset: fastrand::u64(..),
        }
    }
}

#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub addr: SocketAddr,
    /// Further ingest processes: connection i goes to `[addr, more_addrs...][i % n]`.
    pub more_addrs: Vec<SocketAddr>,
    pub sources: Vec<SourceSpec>,
    pub mode: Mode,
    pub duration: Duration,
    pub ids: Ids,
    pub body_size: usize,
    /// Keep (hookgate event id, instant of the 2xx) for every accepted event.
    pub keep_ids: bool,
    /// Requests built (and signed) before the run: request i is `prebuilt[i]`, sent as it
    /// is (`sources` and `ids` unused), and the run ends when they are all sent or at
    /// `duration`, whichever comes first. Its throughput counts the time it took. For
    /// comparing signature schemes whose signing costs differ: the generator shares the
    /// gateway's cores, and signing on the fly would charge the dearer scheme twice.
    pub prebuilt: Option<Arc<Vec<Vec<u8>>>>,
}

/// What one run measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LoadReport {
    pub mode: String,
    pub connections: usize,
    pub target_rate: Option<f64>,
    pub duration_s: f64,
    pub requests: u64,
    pub ok_2xx: u64,
    pub non_2xx: u64,
    pub conn_errors: u64,
    /// 2xx answers per second.
    pub throughput: f64,
    /// Every answered request, 2xx or not.
    pub latency: LatencySummary,
    pub statuses: BTreeMap<String, u64>,
    /// The 100 ms windows (by when their requests were due) holding requests slower than
    /// `SLOW`, worst first, at most `MAX_STALLS`: where a run's tail comes from.
    pub stalls: Vec<Stall>,
}

/// Requests slower than this are counted into `LoadReport::stalls`.
const SLOW: Duration = Duration::from_millis(20);
const MAX_STALLS: usize = 10;

/// One 100 ms window of the run with slow requests in it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Stall {
    /// Seconds from the run's start to the window's start.
    pub at_s: f64,
    /// Requests due in the window that took longer than `SLOW`.
    pub slow: u64,
    pub max_ms: f64,
}

/// A fixed-rate run that answered less than this share of its rate as 2xx per second fell
/// behind: it sends a fixed count, so a gateway that cannot keep up stretches the run
/// instead of dropping requests, and the 2xx count alone would still look complete.
pub const KEPT_UP_SHARE: f64 = 0.98;

impl LoadReport {
    /// An error naming `who` and the gateway log to read, unless every request of the
    /// warm-up was answered 2xx: a warm-up that fails means a misconfigured run, not a result.
    pub fn warm_up_ok(&self, who: &str, log: &std::path::Path) -> anyhow::Result<()> {
        if self.non_2xx + self.conn_errors > 0 {
            anyhow::bail!(
                "{who} answered {} non-2xx ({:?}) and {} connection errors in the warm-up; see {}",
                self.non_2xx,
                self.statuses,
                self.conn_errors,
                log.display()
            );
        }
        Ok(())
    }

    /// Whether a fixed-rate run's 2xx answers kept up with its rate (always, at a fixed
    /// concurrency).
    pub fn kept_up(&self) -> bool {
        self.target_rate
            .is_none_or(|rate| self.throughput >= KEPT_UP_SHARE * rate)
    }

    pub fn line(&self) -> String {
        format!(
            "{}: {:.0} ok/s ({} ok, {} non-2xx, {} conn errors) latency p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.1} ms",
            self.mode,
            self.throughput,
            self.ok_2xx,
            self.non_2xx,
            self.conn_errors,
            self.latency.p50_ms,
            self.latency.p99_ms,
            self.latency.p999_ms,
            self.latency.max_ms
        )
    }

    /// The worst slow windows, one line (empty when none).
    pub fn stalls_line(&self) -> String {
        self.stalls
            .iter()
            .map(|s| format!("{:.1}s: {} slow, max {:.0} ms", s.at_s, s.slow, s.max_ms))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Slow requests grouped into 100 ms windows by due time, worst (longest max) first.
fn stalls(slow: &[(Duration, Duration)]) -> Vec<Stall> {
    let mut windows: BTreeMap<u128, (u64, Duration)> = BTreeMap::new();
    for &(due, took) in slow {
        let w = windows.entry(due.as_millis() / 100).or_default();
        w.0 += 1;
        w.1 = w.1.max(took);
    }
    let mut out: Vec<Stall> = windows
        .into_iter()
        .map(|(w, (n, max))| Stall {
            at_s: w as f64 / 10.0,
            slow: n,
            max_ms: max.as_secs_f64() * 1000.0,
        })
        .collect();
    out.sort_by(|a, b| b.max_ms.total_cmp(&a.max_ms));
    out.truncate(MAX_STALLS);
    out
}

pub struct LoadOutcome {
    pub report: LoadReport,
    /// (hookgate event id, when its 2xx arrived), when `keep_ids` was set.
    pub accepted: Vec<(String, Instant)>,
}

struct Shared {
    spec: LoadSpec,
    next: AtomicU64,
    start: Instant,
    end: Instant,
}

#[derive(Default)]
struct WorkerResult {
    samples: Samples,
    statuses: BTreeMap<u16, u64>,
    conn_errors: u64,
    /// (due time from the start, latency) of each request slower than `SLOW`.
    slow: Vec<(Duration, Duration)>,
    accepted: Vec<(String, Instant)>,
    finished: Option<Instant>,
}

pub async fn run(spec: LoadSpec) -> LoadOutcome {
    let (connections, mode_name, target_rate) = match spec.mode {
        Mode::Concurrency(n) => (n.max(1), format!("concurrency {n}"), None),
        Mode::Rate {
            per_sec,
            connections,
        } => (
            connections.max(1),
            format!("rate {per_sec:.0}/s"),
            Some(per_sec),
        ),
    };
    // Every connection is opened before the clock starts.
    let start = Instant::now() + Duration::from_millis(300);
    let addrs: Vec<SocketAddr> = std::iter::once(spec.addr)
        .chain(spec.more_addrs.iter().copied())
        .collect();
    let shared = Arc::new(Shared {
        next: AtomicU64::new(0),
        start,
        end: start + spec.duration,
        spec,
    });
    let handles: Vec<_> = (0..connections)
        .map(|i| tokio::spawn(worker(shared.clone(), addrs[i % addrs.len()])))
        .collect();
    let mut samples = Samples::with_capacity(1 << 16);
    let mut statuses: BTreeMap<u16, u64> = BTreeMap::new();
    let (mut conn_errors, mut accepted, mut slow, mut last) = (0, Vec::new(), Vec::new(), start);
    for h in handles {
        let r = h.await.expect("load worker panicked");
        samples.merge(r.samples);
        for (s, n) in r.statuses {
            *statuses.entry(s).or_default() += n;
        }
        conn_errors += r.conn_errors;
        accepted.extend(r.accepted);
        slow.extend(r.slow);
        last = last.max(r.finished.unwrap_or(start));
    }
    let elapsed = last.saturating_duration_since(start);
    // A run of prebuilt requests may end early, when they are all sent: its own time counts.
    let elapsed = if shared.spec.prebuilt.is_some() {
        elapsed
    } else {
        elapsed.max(shared.spec.duration)
    }
    .as_secs_f64();
    let ok: u64 = statuses
        .iter()
        .filter(|(s, _)| (200..300).contains(*s))
        .map(|(_, n)| n)
        .sum();
    let answered = samples.len() as u64;
    LoadOutcome {
        report: LoadReport {
            mode: mode_name,
            connections,
            target_rate,
            duration_s: elapsed,
            requests: answered + conn_errors,
            ok_2xx: ok,
            non_2xx: answered - ok,
            conn_errors,
            throughput: ok as f64 / elapsed,
            latency: samples.summary(),
            statuses: statuses
                .into_iter()
                .map(|(s, n)| (s.to_string(), n))
                .collect(),
            stalls: stalls(&slow),
        },
        accepted,
    }
}

async fn worker(shared: Arc<Shared>, addr: SocketAddr) -> WorkerResult {
    let spec = &shared.spec;
    let host = addr.to_string();
    let mut r = WorkerResult::default();
    let mut conn = Conn::connect(addr).await.ok();
    let mut buf = Vec::with_capacity(spec.body_size + 1024);
    tokio::time::sleep_until(shared.start.into()).await;
    loop {
        let i = shared.next.fetch_add(1, Ordering::Relaxed);
        let began = match spec.mode {
            Mode::Concurrency(_) => {
                let now = Instant::now();
                if now >= shared.end {
                    break;
                }
                now
            }
            Mode::Rate { per_sec, .. } => {
                let due = shared.start + Duration::from_secs_f64(i as f64 / per_sec);
                if due >= shared.end {
                    break;
                }
                if Instant::now() >= due {
                    due // behind schedule: the wait counts against the server
                } else {
                    tokio::time::sleep_until(due.into()).await;
                    Instant::now() // idle: the timer's own slack is not the server's
                }
            }
        };
        let request: &[u8] = match &spec.prebuilt {
            Some(all) => match usize::try_from(i).ok().and_then(|i| all.get(i)) {
                Some(r) => r,
                None => break,
            },
            None => {
                let source = &spec.sources[(i % spec.sources.len() as u64) as usize];
                let x = match spec.ids {
                    Ids::Fresh { offset } => offset.wrapping_add(i),
                    Ids::Existing { offset, count } => {
                        offset.wrapping_add(fastrand::u64(..count.max(1)))
                    }
                };
                let id = event_id(source.scheme, x);
                build_request(&mut buf, &host, source, &id, spec.body_size);
                &buf
            }
        };
        if conn.is_none() {
            match Conn::connect(addr).await {
                Ok(c) => conn = Some(c),
                Err(_) => {
                    r.conn_errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let c = conn.as_mut().expect("connected above");
        match c.round_trip(request, spec.keep_ids).await {
            Ok(resp) => {
                let done = Instant::now();
                r.samples.record(done - began);
                if done - began > SLOW {
                    r.slow
                        .push((began.saturating_duration_since(shared.start), done - began));
                }
                *r.statuses.entry(resp.status).or_default() += 1;
                if spec.keep_ids && (200..300).contains(&resp.status) {
                    if let Some(id) = answer_id(&resp.body) {
                        r.accepted.push((id, done));
                    }
                }
                if c.closed {
                    conn = None;
                }
            }
            Err(_) => {
                r.conn_errors += 1;
                conn = None;
            }
        }
    }
    r.finished = Some(Instant::now());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_run_that_stretched_did_not_keep_up() {
        // 300,000 requests due in 60 s, all answered 2xx, but over 68 s: 4,412/s.
        let stretched = LoadReport {
            target_rate: Some(5_000.0),
            ok_2xx: 300_000,
            duration_s: 68.0,
            throughput: 300_000.0 / 68.0,
            ..Default::default()
        };
        assert!(!stretched.kept_up());
        let on_time = LoadReport {
            throughput: 300_000.0 / 61.0,
            duration_s: 61.0,
            ..stretched.clone()
        };
        assert!(on_time.kept_up());
        let closed_loop = LoadReport {
            target_rate: None,
            throughput: 1.0,
            ..Default::default()
        };
        assert!(closed_loop.kept_up());
    }

    #[test]
    fn slow_requests_group_by_the_window_they_were_due_in() {
        let ms = Duration::from_millis;
        let slow = [
            (ms(1_050), ms(30)),
            (ms(1_099), ms(250)),
            (ms(1_100), ms(40)),
            (ms(5_000), ms(21)),
        ];
        let s = stalls(&slow);
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].at_s, s[0].slow, s[0].max_ms), (1.0, 2, 250.0));
        assert_eq!((s[1].at_s, s[1].slow, s[1].max_ms), (1.1, 1, 40.0));
        assert_eq!((s[2].at_s, s[2].slow), (5.0, 1));
    }
}
