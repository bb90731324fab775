//! The load generator: signs Stripe-style webhooks and sends them at a steady rate to the
//! PostgreSQL API pair (round-robin over the live ones) and to the SQLite all-in-one
//! process. A share of events is resent later, and a share is sent as two concurrent copies.
//! Like a provider, every copy is retried on 503, connection errors and timeouts (a bounded
//! number of times, with backoff, honouring Retry-After). Every attempt's answer is recorded.
//! A share of the PostgreSQL events comes from a non-retrying provider (source `stripe-once`):
//! each is recorded in the fake provider API first, then POSTed exactly once, never retried
//! and never resent, as GitHub does; only reconciliation can recover one whose POST failed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;

use crate::procs::Procs;
use crate::provider_api::{ApiState, Produced};

pub const PG_SOURCE: &str = "stripe-pg";
pub const LITE_SOURCE: &str = "stripe-lite";
/// The non-retrying provider's source, on the PostgreSQL processes, reconciled.
pub const ONCE_SOURCE: &str = "stripe-once";
pub const SOURCE_SECRET: &str = "whsec_chaos_source_secret";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Pg,
    Lite,
    /// The non-retrying provider, on the PostgreSQL processes.
    Once,
}

impl Target {
    pub fn label(self) -> &'static str {
        match self {
            Target::Pg => "postgres",
            Target::Lite => "sqlite",
            Target::Once => "pg-once",
        }
    }

    pub fn source(self) -> &'static str {
        match self {
            Target::Pg => PG_SOURCE,
            Target::Lite => LITE_SOURCE,
            Target::Once => ONCE_SOURCE,
        }
    }
}

/// How one copy's attempt was answered.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    Ok {
        id: String,
        duplicate: bool,
    },
    Unavailable {
        retry_after: Option<String>,
    },
    ConnError {
        error: String,
    },
    Timeout,
    /// Anything else (4xx, another 5xx, a 2xx without the expected body): a violation.
    Other {
        status: u16,
        body: String,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    pub at_secs: f64,
    pub slot: String,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Copies {
    Once,
    ResentLater,
    Concurrent,
}

#[derive(Debug, Clone)]
pub struct EventRecord {
    pub target: Target,
    pub copies: Copies,
    pub body: Bytes,
    pub attempts: Vec<Attempt>,
    /// Copies (chains of attempts) that ended without a 2xx.
    pub gave_up: u32,
}

#[derive(Clone, Copy)]
pub struct LoadOpts {
    /// New events per second over both targets.
    pub rate: f64,
    /// Share of new events sent to the PostgreSQL pair (the rest go to SQLite).
    pub pg_share: f64,
    /// Share of the PostgreSQL pair's events that come from the non-retrying provider.
    pub once_share: f64,
    pub resend_later: f64,
    pub concurrent: f64,
    pub max_attempts: u32,
    pub max_in_flight: usize,
    pub request_timeout: Duration,
}

pub struct Load {
    opts: LoadOpts,
    procs: Arc<Procs>,
    /// (slot index, port) of the ingest processes per target.
    pg_ports: Vec<(usize, u16)>,
    lite_port: (usize, u16),
    /// Where the non-retrying provider records what it produced.
    provider_api: Arc<ApiState>,
    client: reqwest::Client,
    started_at: Instant,
    pub records: Mutex<HashMap<String, EventRecord>>,
    stop: AtomicBool,
    in_flight: AtomicUsize,
    rr: AtomicUsize,
    pub backpressure_waits: AtomicU64,
}

impl Load {
    pub fn new(
        opts: LoadOpts,
        procs: Arc<Procs>,
        pg_ports: Vec<(usize, u16)>,
        lite_port: (usize, u16),
        provider_api: Arc<ApiState>,
        started_at: Instant,
    ) -> anyhow::Result<Arc<Load>> {
        let client = reqwest::Client::builder()
            .timeout(opts.request_timeout)
            .connect_timeout(Duration::from_secs(2))
            .pool_idle_timeout(Duration::from_secs(5))
            .build()?;
        Ok(Arc::new(Load {
            opts,
            procs,
            pg_ports,
            lite_port,
            provider_api,
            client,
            started_at,
            records: Mutex::default(),
            stop: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            rr: AtomicUsize::new(0),
            backpressure_waits: AtomicU64::new(0),
        }))
    }

    /// Generates new events until `stop()`; `seed` makes the event mix repeatable.
    pub async fn run(self: Arc<Self>, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let tick = Duration::from_millis(20);
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut seq_pg, mut seq_lite, mut seq_once) = (0u64, 0u64, 0u64);
        let mut credit = 0.0f64;
        let mut last = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            interval.tick().await;
            let now = Instant::now();
            credit += self.opts.rate * now.duration_since(last).as_secs_f64();
            last = now;
            // Never burst after a stall: at most one tick's worth plus one.
            credit = credit.min(self.opts.rate * tick.as_secs_f64() + 1.0);
            while credit >= 1.0 {
                credit -= 1.0;
                if self.in_flight.load(Ordering::SeqCst) >= self.opts.max_in_flight {
                    self.backpressure_waits.fetch_add(1, Ordering::Relaxed);
                    credit = 0.0;
                    break;
                }
                let target = if rng.f64() >= self.opts.pg_share {
                    Target::Lite
                } else if rng.f64() < self.opts.once_share {
                    Target::Once
                } else {
                    Target::Pg
                };
                let id = match target {
                    Target::Pg => {
                        seq_pg += 1;
                        format!("evt_pg_{seq_pg:08}")
                    }
                    Target::Lite => {
                        seq_lite += 1;
                        format!("evt_lite_{seq_lite:08}")
                    }
                    Target::Once => {
                        seq_once += 1;
                        format!("evt_once_{seq_once:08}")
                    }
                };
                if target == Target::Once {
                    self.produce_once(id, &mut rng);
                    continue;
                }
                let r = rng.f64();
                let copies = if r < self.opts.concurrent {
                    Copies::Concurrent
                } else if r < self.opts.concurrent + self.opts.resend_later {
                    Copies::ResentLater
                } else {
                    Copies::Once
                };
                let body = Bytes::from(format!(
                    r#"{{"id":"{id}","object":"event","type":"chaos.{}","created":{},"data":{{"object":{{"seq":{},"note":"{}"}}}}}}"#,
                    target.label(),
                    chrono::Utc::now().timestamp(),
                    rng.u64(..),
                    "x".repeat(rng.usize(0..200)),
                ));
                self.records.lock().unwrap().insert(
                    id.clone(),
                    EventRecord {
                        target,
                        copies,
                        body: body.clone(),
                        attempts: Vec::new(),
                        gave_up: 0,
                    },
                );
                self.spawn_copy(
                    id.clone(),
                    target,
                    body.clone(),
                    Duration::ZERO,
                    rng.u64(..),
                );
                match copies {
                    Copies::Once => {}
                    Copies::Concurrent => {
                        self.spawn_copy(id, target, body, Duration::ZERO, rng.u64(..))
                    }
                    Copies::ResentLater => {
                        let later = Duration::from_millis(rng.u64(1_000..15_000));
                        self.spawn_copy(id, target, body, later, rng.u64(..))
                    }
                }
            }
        }
    }

    /// A non-retrying provider's event: recorded in its API (so reconciliation can list it)
    /// before its one POST, whose outcome does not matter to the provider. The body is
    /// compact JSON with its keys in order, the bytes the gateway writes when it ingests the
    /// event from the API's JSON, so a recovered event's delivery matches the sent body too.
    fn produce_once(self: &Arc<Self>, id: String, rng: &mut fastrand::Rng) {
        let created = chrono::Utc::now().timestamp();
        let value = serde_json::json!({
            "created": created,
            "data": {"object": {"note": "x".repeat(rng.usize(0..200)), "seq": rng.u64(..)}},
            "id": id,
            "object": "event",
            "type": "chaos.pg-once",
        });
        let body = Bytes::from(serde_json::to_vec(&value).expect("JSON serialises"));
        self.records.lock().unwrap().insert(
            id.clone(),
            EventRecord {
                target: Target::Once,
                copies: Copies::Once,
                body: body.clone(),
                attempts: Vec::new(),
                gave_up: 0,
            },
        );
        self.provider_api.record(Produced {
            id: id.clone(),
            created,
            body: body.clone(),
        });
        self.spawn_copy(id, Target::Once, body, Duration::ZERO, rng.u64(..));
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// One event whose sender waits for it before sending the next (the ordered keys):
    /// recorded like any other, one chain of attempts, never resent. Whether it was
    /// answered 2xx.
    pub async fn send_in_turn(&self, id: String, target: Target, body: Bytes, seed: u64) -> bool {
        self.records.lock().unwrap().insert(
            id.clone(),
            EventRecord {
                target,
                copies: Copies::Once,
                body: body.clone(),
                attempts: Vec::new(),
                gave_up: 0,
            },
        );
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.copy(&id, target, &body, seed).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let records = self.records.lock().unwrap();
        records[&id]
            .attempts
            .iter()
            .any(|a| matches!(a.outcome, Outcome::Ok { .. }))
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Waits (bounded) until every copy, including scheduled resends, has finished.
    pub async fn wait_idle(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while self.in_flight() > 0 {
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        true
    }

    fn spawn_copy(
        self: &Arc<Self>,
        id: String,
        target: Target,
        body: Bytes,
        delay: Duration,
        seed: u64,
    ) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let me = self.clone();
        tokio::spawn(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            me.copy(&id, target, &body, seed).await;
            me.in_flight.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// One provider delivery of one event: attempts until a 2xx or a non-retryable answer,
    /// at most `max_attempts` (one for the non-retrying provider).
    async fn copy(&self, id: &str, target: Target, body: &Bytes, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let max_attempts = match target {
            Target::Once => 1,
            _ => self.opts.max_attempts,
        };
        for n in 0..max_attempts {
            let (slot, port) = self.pick(target);
            let outcome = self.send(port, target, body).await;
            let retry_wait = match &outcome {
                Outcome::Ok { .. } | Outcome::Other { .. } => None,
                Outcome::Unavailable { retry_after } => Some(
                    retry_after
                        .as_deref()
                        .and_then(|s| s.parse::<u64>().ok())
                        .map(Duration::from_secs)
                        .unwrap_or_default(),
                ),
                Outcome::ConnError { .. } | Outcome::Timeout => Some(Duration::ZERO),
            };
            let done = retry_wait.is_none();
            let at_secs = self.started_at.elapsed().as_secs_f64();
            if let Some(rec) = self.records.lock().unwrap().get_mut(id) {
                rec.attempts.push(Attempt {
                    at_secs,
                    slot: self.procs.specs[slot].name.clone(),
                    outcome,
                });
                if !done && n + 1 == max_attempts {
                    rec.gave_up += 1;
                }
            }
            let Some(min_wait) = retry_wait else { return };
            if n + 1 == max_attempts {
                return;
            }
            // 200 ms, 400 ms, ... capped at 4 s, with jitter; never before Retry-After.
            let backoff = Duration::from_millis((200u64 << n.min(5)).min(4_000));
            let backoff = backoff.mul_f64(0.75 + rng.f64() / 2.0);
            tokio::time::sleep(backoff.max(min_wait)).await;
        }
    }

    /// Round-robin over the target's live ingest processes (all of them if none is up: the
    /// attempt then gets a connection error, which is a possible outcome).
    fn pick(&self, target: Target) -> (usize, u16) {
        match target {
            Target::Lite => self.lite_port,
            Target::Pg | Target::Once => {
                let live: Vec<(usize, u16)> = self
                    .pg_ports
                    .iter()
                    .copied()
                    .filter(|(slot, _)| self.procs.is_up(*slot))
                    .collect();
                let pool = if live.is_empty() {
                    &self.pg_ports
                } else {
                    &live
                };
                pool[self.rr.fetch_add(1, Ordering::Relaxed) % pool.len()]
            }
        }
    }

    async fn send(&self, port: u16, target: Target, body: &Bytes) -> Outcome {
        let source = target.source();
        // Signed afresh on every attempt, as Stripe does.
        let ts = chrono::Utc::now().timestamp();
        let mut mac = Hmac::<Sha256>::new_from_slice(SOURCE_SECRET.as_bytes()).expect("any key");
        mac.update(format!("{ts}.").as_bytes());
        mac.update(body);
        let sig = hex::encode(mac.finalize().into_bytes());
        let result = self
            .client
            .post(format!("http://127.0.0.1:{port}/webhooks/{source}"))
            .header("Content-Type", "application/json")
            .header("Stripe-Signature", format!("t={ts},v1={sig}"))
            .body(body.clone())
            .send()
            .await;
        let resp = match result {
            Ok(resp) => resp,
            Err(e) if e.is_timeout() => return Outcome::Timeout,
            Err(e) => {
                return Outcome::ConnError {
                    error: error_chain(&e),
                }
            }
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = match resp.text().await {
            Ok(t) => t,
            // The head arrived but the body did not: the connection broke mid-answer.
            Err(e) if e.is_timeout() => return Outcome::Timeout,
            Err(e) => {
                return Outcome::ConnError {
                    error: error_chain(&e),
                }
            }
        };
        match status {
            200..=299 => {
                let parsed: Option<(String, bool)> =
                    serde_json::from_str::<serde_json::Value>(&text)
                        .ok()
                        .and_then(|v| {
                            Some((
                                v.get("id")?.as_str()?.to_owned(),
                                v.get("duplicate")?.as_bool()?,
                            ))
                        });
                match parsed {
                    Some((id, duplicate)) => Outcome::Ok { id, duplicate },
                    None => Outcome::Other {
                        status,
                        body: text.chars().take(200).collect(),
                    },
                }
            }
            503 => Outcome::Unavailable { retry_after },
            _ => Outcome::Other {
                status,
                body: text.chars().take(200).collect(),
            },
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
