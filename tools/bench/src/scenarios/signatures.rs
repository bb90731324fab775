//! What public-key signatures cost: ingest throughput with every request signed Standard
//! Webhooks v1 (HMAC-SHA256, a `whsec_` secret) against v1a (Ed25519, a `whpk_` public key),
//! the same workload on one gateway, the two alternated segment by segment so the machine's
//! noise hits both; optionally a baseline gateway binary (an earlier build) takes HMAC turns
//! in the same rounds, to show HMAC ingest unchanged. Then verification alone,
//! `Unverified::verify` in-process with no HTTP and no store, for HMAC, Ed25519 and ECDSA
//! P-256, alternated the same way, with the bare primitives beside them.
//!
//! Requests are built and signed before each segment (`LoadSpec::prebuilt`): the generator
//! shares the gateway's two cores, and signing Ed25519 on the fly would charge that scheme
//! twice.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use base64::Engine as _;
use bytes::Bytes;
use hmac::Mac as _;
use hookgate::verify::{
    sign_request, ProviderRegistry, RequestHeaders, SignedRequest, SourceOverrides, SourceVerifier,
    Unverified, Verified,
};
use serde::{Deserialize, Serialize};

use super::Ctx;
use crate::gateway::{Gateway, GwConfig, Role};
use crate::loadgen::{self, Ids, LoadReport, LoadSpec, Mode};
use crate::payload::{self, Scheme};

/// A destination nobody listens on: role `api` starts no workers.
const NO_SINK: &str = "http://127.0.0.1:9/unused";

/// The Ed25519 and ECDSA test keys' seed / scalar, and the HMAC secret's bytes.
const SEED: [u8; 32] = [0x42; 32];
const HMAC_KEY: [u8; 32] = [0x5a; 32];

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn whsec() -> String {
    format!("whsec_{}", b64(&HMAC_KEY))
}

fn ed25519_public() -> [u8; 32] {
    ed25519_dalek::SigningKey::from_bytes(&SEED)
        .verifying_key()
        .to_bytes()
}

/// SendGrid's key format: a DER SubjectPublicKeyInfo (fixed header, uncompressed point).
fn p256_public_der() -> Vec<u8> {
    let key = p256::ecdsa::SigningKey::from_bytes(&SEED.into()).expect("a valid P-256 scalar");
    let point = key.verifying_key().to_encoded_point(false);
    let mut der =
        hex::decode("3059301306072a8648ce3d020106082a8648ce3d030107034200").expect("valid hex");
    der.extend_from_slice(point.as_bytes());
    der
}

/// A source of a built-in provider with one key, and the private key to sign with.
fn source(provider: &str, key: &str, signing_key: Option<&str>) -> anyhow::Result<SourceVerifier> {
    let registry = ProviderRegistry::builtin()?;
    let def = registry
        .get(provider)
        .with_context(|| format!("no built-in provider {provider}"))?
        .with_overrides(&SourceOverrides::default())
        .map_err(|(what, why)| anyhow!("{provider}: {what}: {why}"))?;
    let v = SourceVerifier::new(def, &[key])
        .map_err(|(_, why)| anyhow!("{provider}: the key {why}"))?;
    match signing_key {
        Some(k) => v
            .with_signing_key(k)
            .map_err(|why| anyhow!("{provider}: the signing key {why}")),
        None => Ok(v),
    }
}

fn swh_hmac() -> anyhow::Result<SourceVerifier> {
    source("standard-webhooks", &whsec(), None)
}

fn swh_ed25519() -> anyhow::Result<SourceVerifier> {
    let public = format!("whpk_{}", b64(&ed25519_public()));
    source(
        "standard-webhooks",
        &public,
        Some(&format!("whsk_{}", b64(&SEED))),
    )
}

/// One signed request: a Stripe-shaped JSON body of the bench's size, id `evt_...`.
fn signed(
    signer: &SourceVerifier,
    x: u64,
    now: i64,
    body_size: usize,
) -> anyhow::Result<SignedRequest> {
    let id = payload::event_id(Scheme::Stripe, x);
    let body = payload::body(Scheme::Stripe, &id, now, body_size);
    sign_request(signer, body, &id, "invoice.paid", now).map_err(|e| anyhow!("signing: {e}"))
}

fn http_request(host: &str, source: &str, r: &SignedRequest) -> Vec<u8> {
    use std::io::Write as _;
    let mut out = Vec::with_capacity(r.body.len() + 512);
    let query = if r.query.is_empty() {
        String::new()
    } else {
        format!("?{}", r.query)
    };
    let _ = write!(
        out,
        "POST /webhooks/{source}{query} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n",
        r.body.len()
    );
    for (name, value) in r.headers.iter() {
        let _ = write!(out, "{name}: {value}\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&r.body);
    out
}

/// `count` requests with fresh ids, signed by `signer`, on every core.
fn build_requests(
    signer: &SourceVerifier,
    host: &str,
    source: &str,
    count: usize,
    body_size: usize,
) -> anyhow::Result<Vec<Vec<u8>>> {
    let now = chrono::Utc::now().timestamp();
    let offset = fastrand::u64(..);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = count.div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    (t * per..((t + 1) * per).min(count))
                        .map(|i| {
                            let r = signed(signer, offset.wrapping_add(i as u64), now, body_size)?;
                            Ok(http_request(host, source, &r))
                        })
                        .collect::<anyhow::Result<Vec<_>>>()
                })
            })
            .collect();
        let mut all = Vec::with_capacity(count);
        for h in handles {
            all.extend(
                h.join()
                    .map_err(|_| anyhow!("a signing thread panicked"))??,
            );
        }
        Ok(all)
    })
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Signatures {
    /// Ingest, HMAC against Ed25519 (and the baseline's HMAC), per store.
    pub ingest: Vec<SchemeIngest>,
    /// Verification alone, in-process.
    pub verify: Option<VerifyCost>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SchemeIngest {
    /// "sqlite" or "postgres".
    pub store: String,
    /// How the store ran (SQLite's default synchronous=FULL; PostgreSQL's version and
    /// synchronous_commit).
    pub store_settings: String,
    pub concurrency: usize,
    pub requests_per_segment: usize,
    pub rounds: usize,
    pub legs: Vec<LegResult>,
    /// Ed25519 events/s / HMAC events/s, every segment of each pooled.
    pub ed25519_to_hmac: f64,
    /// The same, round by round.
    pub ed25519_to_hmac_rounds: Vec<f64>,
    /// This build's HMAC events/s / the baseline build's, when a baseline ran.
    pub hmac_to_baseline: Option<f64>,
    pub hmac_to_baseline_rounds: Vec<f64>,
    /// This build's Ed25519 events/s / the baseline build's, when a baseline ran.
    pub ed25519_to_baseline: Option<f64>,
    pub ed25519_to_baseline_rounds: Vec<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LegResult {
    /// "hmac", "ed25519", "hmac-baseline" or "ed25519-baseline".
    pub name: String,
    /// What signs the requests.
    pub signature: String,
    /// Which gateway binary, and its build label.
    pub gateway: String,
    pub segments: Vec<Segment>,
    /// 2xx over the time of all its segments.
    pub throughput: f64,
    pub non_2xx: u64,
    pub conn_errors: u64,
    /// The segments' CPU split, averaged.
    pub cpu: CpuSplit,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Segment {
    pub round: usize,
    pub ok_2xx: u64,
    pub seconds: f64,
    pub throughput: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Where the segment's CPU went, where the scenario measures it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuSplit>,
}

/// A gateway binary to compare this build's HMAC ingest with, and how to name it.
#[derive(Debug, Clone)]
pub struct Baseline {
    pub bin: PathBuf,
    pub label: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    Sqlite,
    Postgres,
    /// No ingest: verification alone.
    None,
}

impl std::str::FromStr for Store {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sqlite" => Ok(Self::Sqlite),
            "pg" | "postgres" => Ok(Self::Postgres),
            "none" => Ok(Self::None),
            other => Err(format!("unknown store {other:?} (sqlite, pg or none)")),
        }
    }
}

pub async fn run(
    ctx: &Ctx,
    stores: &[Store],
    baseline: Option<&Baseline>,
    rounds: Option<usize>,
    requests: Option<usize>,
) -> anyhow::Result<Signatures> {
    let mut out = Signatures::default();
    println!("  verification alone (Unverified::verify, one thread, no HTTP, no store)");
    let verify = tokio::task::spawn_blocking({
        let secs = ctx.secs(20, 4);
        move || verify_cost(secs)
    })
    .await??;
    for s in &verify.schemes {
        println!("    {}", s.line());
    }
    out.verify = Some(verify);
    let rounds = rounds.unwrap_or(if ctx.quick { 2 } else { 4 });
    let requests = requests.unwrap_or(if ctx.quick { 20_000 } else { 120_000 });
    for &store in stores.iter().filter(|s| **s != Store::None) {
        out.ingest
            .push(ingest(ctx, store, baseline, rounds, requests).await?);
    }
    Ok(out)
}

struct Leg {
    name: &'static str,
    signature: &'static str,
    source: &'static str,
    signer: Arc<SourceVerifier>,
    /// Index into the gateways.
    gateway: usize,
}

async fn ingest(
    ctx: &Ctx,
    store: Store,
    baseline: Option<&Baseline>,
    rounds: usize,
    requests: usize,
) -> anyhow::Result<SchemeIngest> {
    let hmac_source = format!(
        "[[sources]]\nname = \"swh-hmac\"\nprovider = \"standard-webhooks\"\nsecrets = [\"{}\"]\ndestinations = [\"sink\"]\n",
        whsec()
    );
    let ed_source = format!(
        "[[sources]]\nname = \"swh-ed25519\"\nprovider = \"standard-webhooks\"\nsecrets = [\"whpk_{}\"]\ndestinations = [\"sink\"]\n",
        b64(&ed25519_public())
    );
    let tags: Vec<&str> = if baseline.is_some() {
        vec!["current", "baseline"]
    } else {
        vec!["current"]
    };
    // One database each.
    let mut dbs = Vec::new();
    let mut urls = Vec::new();
    let store_settings = match store {
        Store::Sqlite => {
            std::fs::create_dir_all(&ctx.gw.work_dir)?;
            for t in &tags {
                let name = format!("signatures-{t}.db");
                urls.push(ctx.sqlite_url(&name));
                dbs.push(name);
            }
            "SQLite, the gateway's default (WAL, synchronous=FULL)".to_owned()
        }
        Store::None => bail!("no store to ingest into"),
        Store::Postgres => {
            for t in &tags {
                let db = ctx.pg.create_db(&format!("signatures_{t}")).await?;
                urls.push(ctx.pg.url(&db));
                dbs.push(db);
            }
            let mut settings = Vec::new();
            for name in ["shared_buffers", "max_wal_size", "synchronous_commit"] {
                let value = ctx.pg.setting(name).await.unwrap_or_default();
                settings.push(format!("{name}={value}"));
            }
            format!(
                "PostgreSQL {} ({})",
                ctx.pg.setting("server_version").await.unwrap_or_default(),
                settings.join(", ")
            )
        }
    };
    println!("  ingest on {store_settings}");
    let result = async {
        let mut current = GwConfig::new(urls[0].clone(), NO_SINK);
        current.extra_sources = vec![hmac_source.clone(), ed_source.clone()];
        let store_tag = match store {
            Store::Sqlite => "sqlite",
            _ => "pg",
        };
        let mut gateways = vec![(
            Gateway::start(
                &ctx.gw,
                &current,
                Role::Api,
                &format!("signatures-{store_tag}-current"),
            )
            .await?,
            "this build".to_owned(),
        )];
        let hmac = Arc::new(swh_hmac()?);
        let mut legs = vec![
            Leg {
                name: "hmac",
                signature: "Standard Webhooks v1, HMAC-SHA256 (whsec_ secret)",
                source: "swh-hmac",
                signer: hmac.clone(),
                gateway: 0,
            },
            Leg {
                name: "ed25519",
                signature: "Standard Webhooks v1a, Ed25519 (whpk_ public key)",
                source: "swh-ed25519",
                signer: Arc::new(swh_ed25519()?),
                gateway: 0,
            },
        ];
        if let Some(b) = baseline {
            let mut cfg = GwConfig::new(urls[1].clone(), NO_SINK);
            cfg.extra_sources = vec![hmac_source, ed_source];
            let mut opts = ctx.gw.clone();
            opts.bin = std::fs::canonicalize(&b.bin)
                .with_context(|| format!("the baseline gateway {}", b.bin.display()))?;
            let gw = Gateway::start(
                &opts,
                &cfg,
                Role::Api,
                &format!("signatures-{store_tag}-baseline"),
            )
            .await?;
            gateways.push((gw, format!("baseline {}", b.label)));
            let ed25519 = legs[1].signer.clone();
            legs.push(Leg {
                name: "hmac-baseline",
                signature: "Standard Webhooks v1, HMAC-SHA256 (whsec_ secret)",
                source: "swh-hmac",
                signer: hmac,
                gateway: 1,
            });
            legs.push(Leg {
                name: "ed25519-baseline",
                signature: "Standard Webhooks v1a, Ed25519 (whpk_ public key)",
                source: "swh-ed25519",
                signer: ed25519,
                gateway: 1,
            });
        }
        let mut results: Vec<LegResult> = legs
            .iter()
            .map(|l| LegResult {
                name: l.name.into(),
                signature: l.signature.into(),
                gateway: gateways[l.gateway].1.clone(),
                ..Default::default()
            })
            .collect();
        // Warm-up: a quarter segment on each leg, not counted.
        for leg in &legs {
            let (r, _) =
                segment(ctx, leg, &gateways[leg.gateway].0, (requests / 4).max(1)).await?;
            println!("    warm-up {:>13}: {}", leg.name, r.line());
            r.warm_up_ok(leg.name, &gateways[leg.gateway].0.log)?;
        }
        // Rounds: forward, then backward, so neither leg always follows the other.
        for round in 0..rounds {
            let order: Vec<usize> = if round % 2 == 0 {
                (0..legs.len()).collect()
            } else {
                (0..legs.len()).rev().collect()
            };
            for i in order {
                let leg = &legs[i];
                let (r, cpu) = segment(ctx, leg, &gateways[leg.gateway].0, requests).await?;
                println!("    round {round} {:>13}: {}", leg.name, r.line());
                println!("    {:>21}  {}", "", cpu.line());
                let res = &mut results[i];
                res.non_2xx += r.non_2xx;
                res.conn_errors += r.conn_errors;
                res.segments.push(Segment {
                    round,
                    ok_2xx: r.ok_2xx,
                    seconds: r.duration_s,
                    throughput: r.throughput,
                    p50_ms: r.latency.p50_ms,
                    p99_ms: r.latency.p99_ms,
                    cpu: Some(cpu),
                });
            }
        }
        for (gw, _) in gateways {
            gw.stop().await?;
        }
        for r in &mut results {
            let ok: u64 = r.segments.iter().map(|s| s.ok_2xx).sum();
            let secs: f64 = r.segments.iter().map(|s| s.seconds).sum();
            r.throughput = ok as f64 / secs.max(1e-9);
            let splits: Vec<CpuSplit> = r.segments.iter().filter_map(|s| s.cpu).collect();
            r.cpu = CpuSplit::mean(&splits);
            println!("    {:>13}: {}", r.name, r.cpu.line());
        }
        let ratio = |a: &LegResult, b: &LegResult| a.throughput / b.throughput.max(1e-9);
        let per_round = |a: &LegResult, b: &LegResult| -> Vec<f64> {
            a.segments
                .iter()
                .zip(&b.segments)
                .map(|(x, y)| x.throughput / y.throughput.max(1e-9))
                .collect()
        };
        let ed25519_to_hmac = ratio(&results[1], &results[0]);
        let ed25519_to_hmac_rounds = per_round(&results[1], &results[0]);
        let against_baseline = |i: usize, b: usize| match results.get(b) {
            Some(base) => (Some(ratio(&results[i], base)), per_round(&results[i], base)),
            None => (None, Vec::new()),
        };
        let (hmac_to_baseline, hmac_to_baseline_rounds) = against_baseline(0, 2);
        let (ed25519_to_baseline, ed25519_to_baseline_rounds) = against_baseline(1, 3);
        println!(
            "  => Ed25519 {:.0} events/s / HMAC {:.0} events/s = {ed25519_to_hmac:.3}x (rounds: {})",
            results[1].throughput,
            results[0].throughput,
            crate::stats::ratios_line(&ed25519_to_hmac_rounds)
        );
        for (scheme, i, b, r, rounds) in [
            ("HMAC", 0, 2, hmac_to_baseline, &hmac_to_baseline_rounds),
            ("Ed25519", 1, 3, ed25519_to_baseline, &ed25519_to_baseline_rounds),
        ] {
            if let (Some(r), Some(base)) = (r, results.get(b)) {
                println!(
                    "  => {scheme} this build {:.0} events/s / {} {:.0} events/s = {r:.3}x (rounds: {})",
                    results[i].throughput,
                    base.gateway,
                    base.throughput,
                    crate::stats::ratios_line(rounds)
                );
            }
        }
        anyhow::Ok(SchemeIngest {
            store: store_tag.into(),
            store_settings: store_settings.clone(),
            concurrency: ctx.concurrency,
            requests_per_segment: requests,
            rounds,
            legs: results,
            ed25519_to_hmac,
            ed25519_to_hmac_rounds,
            hmac_to_baseline,
            hmac_to_baseline_rounds,
            ed25519_to_baseline,
            ed25519_to_baseline_rounds,
        })
    }
    .await;
    match store {
        Store::Sqlite => {
            for db in &dbs {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(ctx.gw.work_dir.join(format!("{db}{suffix}")));
                }
            }
        }
        _ => {
            for db in &dbs {
                ctx.pg.drop_db(db).await;
            }
        }
    }
    result
}

/// `count` prebuilt requests of `leg` at the fixed concurrency, to the end, and what the
/// sending cost in CPU.
async fn segment(
    ctx: &Ctx,
    leg: &Leg,
    gw: &Gateway,
    count: usize,
) -> anyhow::Result<(LoadReport, CpuSplit)> {
    let addr = gw.addr();
    let signer = leg.signer.clone();
    let (source, body_size) = (leg.source, ctx.body_size);
    let prebuilt = tokio::task::spawn_blocking(move || {
        build_requests(&signer, &addr.to_string(), source, count, body_size)
    })
    .await??;
    let before = CpuSample::take(gw);
    let report = loadgen::run(LoadSpec {
        addr,
        more_addrs: Vec::new(),
        sources: Vec::new(),
        mode: Mode::Concurrency(ctx.concurrency),
        duration: Duration::from_secs(600),
        ids: Ids::fresh(),
        body_size: ctx.body_size,
        keep_ids: false,
        prebuilt: Some(Arc::new(prebuilt)),
    })
    .await
    .report;
    let cpu = CpuSample::take(gw).since(&before, report.ok_2xx);
    Ok((report, cpu))
}

/// CPU time so far: the gateway's, the load generator's (this process) and the machine's.
struct CpuSample {
    at: Instant,
    gateway: f64,
    loadgen: f64,
    machine: f64,
}

impl CpuSample {
    fn take(gw: &Gateway) -> Self {
        Self {
            at: Instant::now(),
            gateway: gw.cpu_seconds().unwrap_or(0.0),
            loadgen: crate::cpu::own_seconds().unwrap_or(0.0),
            machine: crate::cpu::machine_busy_seconds(),
        }
    }

    fn since(&self, before: &Self, events: u64) -> CpuSplit {
        let per_event = |secs: f64| secs * 1e6 / events.max(1) as f64;
        let gateway = per_event(self.gateway - before.gateway);
        let loadgen = per_event(self.loadgen - before.loadgen);
        let machine = per_event(self.machine - before.machine);
        CpuSplit {
            gateway_us: gateway,
            loadgen_us: loadgen,
            rest_us: (machine - gateway - loadgen).max(0.0),
            cores_busy: (self.machine - before.machine)
                / self.at.duration_since(before.at).as_secs_f64().max(1e-9),
        }
    }
}

/// CPU per accepted event during a segment, split by who spent it (the rest is the database
/// and anything else on the machine), and how many cores were busy on average.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuSplit {
    pub gateway_us: f64,
    pub loadgen_us: f64,
    pub rest_us: f64,
    pub cores_busy: f64,
}

impl CpuSplit {
    fn line(&self) -> String {
        format!(
            "CPU per event: gateway {:.1} µs, load {:.1} µs, rest {:.1} µs; {:.2} cores busy",
            self.gateway_us, self.loadgen_us, self.rest_us, self.cores_busy
        )
    }

    fn mean(splits: &[CpuSplit]) -> CpuSplit {
        let n = splits.len().max(1) as f64;
        let sum = |f: fn(&CpuSplit) -> f64| splits.iter().map(f).sum::<f64>() / n;
        CpuSplit {
            gateway_us: sum(|c| c.gateway_us),
            loadgen_us: sum(|c| c.loadgen_us),
            rest_us: sum(|c| c.rest_us),
            cores_busy: sum(|c| c.cores_busy),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct VerifyCost {
    /// Seconds spent verifying, all schemes together.
    pub seconds: f64,
    pub rounds: usize,
    /// `Unverified::verify` of whole requests, then the bare primitives.
    pub schemes: Vec<VerifyScheme>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct VerifyScheme {
    pub name: String,
    /// `verify`: whole requests through `Unverified::verify`; `primitive`: the signature
    /// check alone, over the same signed bytes.
    pub kind: String,
    pub verified: u64,
    pub seconds: f64,
    pub per_s: f64,
    pub us_each: f64,
    /// per_s / the first scheme's (Standard Webhooks v1, HMAC) per_s.
    pub ratio_to_hmac: f64,
    /// The ratio round by round: lowest and highest.
    pub ratio_min: f64,
    pub ratio_max: f64,
}

impl VerifyScheme {
    pub fn line(&self) -> String {
        format!(
            "{:<52} {:>9.0}/s {:>8.2} µs  {:.3}x HMAC (rounds {:.3}–{:.3})",
            format!("{} [{}]", self.name, self.kind),
            self.per_s,
            self.us_each,
            self.ratio_to_hmac,
            self.ratio_min,
            self.ratio_max
        )
    }
}

/// Requests per batch; a batch is built before its clock starts.
const BATCH: usize = 256;
/// Each case's share of a round, at least.
const SLICE: Duration = Duration::from_millis(40);

/// A bare signature check: (message, signature) -> valid.
type Check = Box<dyn Fn(&[u8], &[u8]) -> bool + Send>;

enum Work {
    Verify {
        verifier: Box<SourceVerifier>,
        pool: Vec<(RequestHeaders, Bytes, String)>,
    },
    Primitive {
        check: Check,
        pool: Vec<(Vec<u8>, Vec<u8>)>,
    },
}

struct Case {
    name: String,
    work: Work,
}

impl Case {
    fn verify(name: &str, verifier: SourceVerifier, now: i64, n: usize) -> anyhow::Result<Self> {
        let pool = (0..n as u64)
            .map(|x| {
                let r = signed(&verifier, fastrand::u64(..) ^ x, now, 512)?;
                Ok((r.headers, Bytes::from(r.body), r.query))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self {
            name: name.into(),
            work: Work::Verify {
                verifier: Box::new(verifier),
                pool,
            },
        })
    }

    fn primitive(
        name: &str,
        sign: impl Fn(&[u8]) -> Vec<u8>,
        check: impl Fn(&[u8], &[u8]) -> bool + Send + 'static,
        now: i64,
        n: usize,
    ) -> Self {
        let pool = (0..n as u64)
            .map(|x| {
                let id = payload::event_id(Scheme::Stripe, fastrand::u64(..) ^ x);
                let body = payload::body(Scheme::Stripe, &id, now, 512);
                let mut msg = format!("{id}.{now}.").into_bytes();
                msg.extend_from_slice(&body);
                let sig = sign(&msg);
                (msg, sig)
            })
            .collect();
        Self {
            name: name.into(),
            work: Work::Primitive {
                check: Box::new(check),
                pool,
            },
        }
    }

    fn len(&self) -> usize {
        match &self.work {
            Work::Verify { pool, .. } => pool.len(),
            Work::Primitive { pool, .. } => pool.len(),
        }
    }

    fn kind(&self) -> &'static str {
        match self.work {
            Work::Verify { .. } => "verify",
            Work::Primitive { .. } => "primitive",
        }
    }

    /// One batch; the time spent verifying it (building it is not counted).
    fn batch(&self, now: i64) -> anyhow::Result<Duration> {
        match &self.work {
            Work::Verify { verifier, pool } => {
                let batch: Vec<Unverified> = pool
                    .iter()
                    .map(|(h, b, q)| Unverified::new(h.clone(), b.clone()).with_target("POST", q))
                    .collect();
                let t = Instant::now();
                for u in batch {
                    match u.verify(verifier, now) {
                        Ok(Verified::Event(e)) => {
                            black_box(e);
                        }
                        Ok(Verified::Challenge(_)) => bail!("{}: a challenge", self.name),
                        Err(e) => bail!("{}: {e}", self.name),
                    }
                }
                Ok(t.elapsed())
            }
            Work::Primitive { check, pool } => {
                let t = Instant::now();
                for (m, s) in pool {
                    if !check(black_box(m), s) {
                        bail!("{}: a signature did not verify", self.name);
                    }
                }
                Ok(t.elapsed())
            }
        }
    }
}

/// The cases, each with `n` signed requests (or messages): Standard Webhooks v1 (HMAC) first.
fn cases(now: i64, n: usize) -> anyhow::Result<Vec<Case>> {
    let discord_public = hex::encode(ed25519_public());
    let sendgrid_public = b64(&p256_public_der());
    let ed_signing = ed25519_dalek::SigningKey::from_bytes(&SEED);
    let ed_public = ed_signing.verifying_key();
    let p256_signing = p256::ecdsa::SigningKey::from_bytes(&SEED.into())?;
    let p256_public = *p256_signing.verifying_key();
    let hmac_sign = |m: &[u8]| {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&HMAC_KEY).expect("any length");
        mac.update(m);
        mac.finalize().into_bytes().to_vec()
    };
    Ok(vec![
        Case::verify("Standard Webhooks v1, HMAC-SHA256", swh_hmac()?, now, n)?,
        Case::verify("Standard Webhooks v1a, Ed25519", swh_ed25519()?, now, n)?,
        Case::verify(
            "Discord, Ed25519",
            source("discord", &discord_public, Some(&hex::encode(SEED)))?,
            now,
            n,
        )?,
        Case::verify(
            "SendGrid, ECDSA P-256",
            source("sendgrid", &sendgrid_public, Some(&b64(&SEED)))?,
            now,
            n,
        )?,
        Case::primitive(
            "HMAC-SHA256 (hmac crate) + compare",
            hmac_sign,
            move |m, s| hmac_sign(m).as_slice() == s,
            now,
            n,
        ),
        Case::primitive(
            "Ed25519 verify_strict (ed25519-dalek)",
            |m| {
                use ed25519_dalek::Signer as _;
                ed_signing.sign(m).to_bytes().to_vec()
            },
            move |m, s| {
                ed25519_dalek::Signature::from_slice(s)
                    .is_ok_and(|sig| ed_public.verify_strict(m, &sig).is_ok())
            },
            now,
            n,
        ),
        Case::primitive(
            "Ed25519 verify (ed25519-dalek, not strict)",
            |m| {
                use ed25519_dalek::Signer as _;
                ed_signing.sign(m).to_bytes().to_vec()
            },
            move |m, s| {
                use ed25519_dalek::Verifier as _;
                ed25519_dalek::Signature::from_slice(s)
                    .is_ok_and(|sig| ed_public.verify(m, &sig).is_ok())
            },
            now,
            n,
        ),
        Case::primitive(
            "Ed25519 verify (ring)",
            |m| {
                use ed25519_dalek::Signer as _;
                ed_signing.sign(m).to_bytes().to_vec()
            },
            move |m, s| {
                ring::signature::UnparsedPublicKey::new(
                    &ring::signature::ED25519,
                    ed_public.as_bytes(),
                )
                .verify(m, s)
                .is_ok()
            },
            now,
            n,
        ),
        Case::primitive(
            "ECDSA P-256 verify (p256)",
            |m| {
                use p256::ecdsa::signature::Signer as _;
                let sig: p256::ecdsa::Signature = p256_signing.sign(m);
                sig.to_der().as_bytes().to_vec()
            },
            move |m, s| {
                use p256::ecdsa::signature::Verifier as _;
                p256::ecdsa::Signature::from_der(s)
                    .is_ok_and(|sig| p256_public.verify(m, &sig).is_ok())
            },
            now,
            n,
        ),
    ])
}

fn verify_cost(total: Duration) -> anyhow::Result<VerifyCost> {
    let now = chrono::Utc::now().timestamp();
    let cases = cases(now, BATCH)?;
    // Warm-up: one batch each.
    for c in &cases {
        c.batch(now)?;
    }
    let n = cases.len();
    let mut spent = vec![Duration::ZERO; n];
    let mut counts = vec![0u64; n];
    let mut round_rates: Vec<Vec<f64>> = vec![Vec::new(); n];
    let clock = Instant::now();
    let mut rounds = 0;
    while clock.elapsed() < total || rounds < 2 {
        let order: Vec<usize> = if rounds % 2 == 0 {
            (0..n).collect()
        } else {
            (0..n).rev().collect()
        };
        for i in order {
            let (mut t, mut k) = (Duration::ZERO, 0u64);
            while t < SLICE {
                t += cases[i].batch(now)?;
                k += cases[i].len() as u64;
            }
            spent[i] += t;
            counts[i] += k;
            round_rates[i].push(k as f64 / t.as_secs_f64());
        }
        rounds += 1;
    }
    let hmac_rate = counts[0] as f64 / spent[0].as_secs_f64();
    let schemes = cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let per_s = counts[i] as f64 / spent[i].as_secs_f64();
            let ratios: Vec<f64> = round_rates[i]
                .iter()
                .zip(&round_rates[0])
                .map(|(a, b)| a / b)
                .collect();
            VerifyScheme {
                name: c.name.clone(),
                kind: c.kind().into(),
                verified: counts[i],
                seconds: spent[i].as_secs_f64(),
                per_s,
                us_each: 1e6 / per_s,
                ratio_to_hmac: per_s / hmac_rate,
                ratio_min: ratios.iter().copied().fold(f64::INFINITY, f64::min),
                ratio_max: ratios.iter().copied().fold(0.0, f64::max),
            }
        })
        .collect();
    Ok(VerifyCost {
        seconds: spent.iter().map(Duration::as_secs_f64).sum(),
        rounds,
        schemes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every case's requests verify (the keys and providers are wired right).
    #[test]
    fn every_case_verifies() {
        let now = chrono::Utc::now().timestamp();
        let cases = cases(now, 2).unwrap();
        assert_eq!(cases.len(), 9);
        for c in &cases {
            c.batch(now).unwrap_or_else(|e| panic!("{e:#}"));
        }
    }

    #[test]
    fn prebuilt_requests_are_http() {
        let reqs = build_requests(&swh_ed25519().unwrap(), "h:1", "swh-ed25519", 3, 512).unwrap();
        assert_eq!(reqs.len(), 3);
        let text = String::from_utf8(reqs[0].clone()).unwrap();
        assert!(text.starts_with("POST /webhooks/swh-ed25519 HTTP/1.1\r\n"));
        assert!(text.contains("webhook-signature: v1a,"), "{text}");
        let (_, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(text.contains(&format!("Content-Length: {}\r\n", body.len())));
    }
}
