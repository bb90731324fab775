//! What filtered routes cost ingest: the same Stripe events sent to two sources of one
//! gateway (role `api`), one with a plain destination (`destinations = ["sink"]`) and one
//! with ten `[[sources.routes]]`, each an `event_types` glob and a `match` body filter, of
//! which each event matches exactly one (`route_load`). Both create one job per event, so
//! the difference is the routing: the type checked against ten globs, the body parsed once
//! and one or two filters run on it. As in `signatures`, requests are built and signed
//! before each segment, each segment sends a fixed count, and the two legs alternate in
//! rounds (forward, then backward) so the machine's noise and the database's growth hit
//! both. After the run, the store's events and jobs per source are counted: one job per
//! event on both legs, spread over the ten destinations on the routed one.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use serde::{Deserialize, Serialize};

use super::route_load::{self, PLAIN_SOURCE, ROUTED_SOURCE, ROUTES};
use super::route_select::{self, SelectCost};
use super::signatures::{Segment, Store};
use super::Ctx;
use crate::gateway::{Gateway, Role};
use crate::loadgen::{self, Ids, LoadReport, LoadSpec, Mode};
use crate::markdown::{met, rate, ratio_range};

/// The target: ingest with the ten filtered routes at least this share of the plain rate.
pub const TARGET: f64 = 0.95;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Routes {
    /// Plain against filtered, per store.
    pub ingest: Vec<RouteIngest>,
    /// `RouteTable::select` alone, in-process.
    pub select: Option<SelectCost>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RouteIngest {
    /// "sqlite" or "pg".
    pub store: String,
    pub store_settings: String,
    pub concurrency: usize,
    pub requests_per_segment: usize,
    pub rounds: usize,
    /// Routes of the filtered source.
    pub routes: usize,
    /// "plain", then "filtered".
    pub legs: Vec<RouteLeg>,
    /// Filtered events/s / plain events/s, every segment of each pooled.
    pub filtered_to_plain: f64,
    /// The same, round by round.
    pub filtered_to_plain_rounds: Vec<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RouteLeg {
    pub name: String,
    pub source: String,
    /// The source's routing, in words.
    pub routing: String,
    pub segments: Vec<Segment>,
    /// 2xx over the time of all its segments.
    pub throughput: f64,
    pub non_2xx: u64,
    pub conn_errors: u64,
    /// The gateway's CPU time (user + system) over its segments per 2xx: what the routing
    /// costs, less sensitive than the rate to other work on the machine.
    pub cpu_us_per_event: f64,
    /// Per segment, in the order of `segments`.
    pub cpu_us_per_event_segments: Vec<f64>,
    /// Events stored for the source after the run (warm-up included), and their jobs.
    pub events: u64,
    pub jobs: u64,
    pub jobs_by_destination: BTreeMap<String, u64>,
}

impl RouteLeg {
    /// Answered 2xx to everything, and stored one job per event.
    pub fn clean(&self) -> bool {
        self.non_2xx + self.conn_errors == 0 && self.events > 0 && self.jobs == self.events
    }
}

impl Routes {
    /// The details below bench/RESULTS.md's table.
    pub fn details(&self, s: &mut String) {
        if let Some(c) = &self.select {
            let _ = writeln!(
                s,
                "\nRouting alone (`RouteTable::select` on one thread, no HTTP, no store; the `routes` events, {} alternated rounds): {:.2} µs per event with the ten filtered routes, of which the body's JSON parse {:.2} µs; {:.2} µs with one plain destination.",
                c.rounds, c.filtered_us, c.parse_us, c.plain_us
            );
        }
    }
}

impl RouteIngest {
    pub fn met(&self) -> bool {
        self.filtered_to_plain >= TARGET
            && self.legs.len() == 2
            && self.legs.iter().all(RouteLeg::clean)
    }

    /// The row of bench/RESULTS.md's table.
    pub fn table_row(&self, s: &mut String) {
        let (Some(plain), Some(filtered)) = (self.legs.first(), self.legs.get(1)) else {
            return;
        };
        let store = if self.store == "sqlite" {
            "SQLite"
        } else {
            "PostgreSQL"
        };
        let jobs = if plain.clean() && filtered.clean() {
            "one job per event on both".to_owned()
        } else {
            format!(
                "jobs/events: plain {}/{}, filtered {}/{}; non-2xx {} and {}",
                plain.jobs,
                plain.events,
                filtered.jobs,
                filtered.events,
                plain.non_2xx + plain.conn_errors,
                filtered.non_2xx + filtered.conn_errors
            )
        };
        let cpu = if plain.cpu_us_per_event > 0.0 && filtered.cpu_us_per_event > 0.0 {
            format!(
                "; gateway CPU {:.1} vs {:.1} µs per event",
                filtered.cpu_us_per_event, plain.cpu_us_per_event
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "| Ingest with {} filtered routes (`event_types` glob + `match` on the body, one matching each event) vs one plain destination, {store}, alternated | ≥ {TARGET:.2}× | {} vs {} events/s at concurrency {} ({} rounds of {} requests each, per round {}{cpu}; {jobs}; {}) | {:.3}× | {} |",
            self.routes,
            rate(filtered.throughput),
            rate(plain.throughput),
            self.concurrency,
            self.rounds,
            rate(self.requests_per_segment as f64),
            ratio_range(&self.filtered_to_plain_rounds),
            self.store_settings,
            self.filtered_to_plain,
            met(self.met())
        );
    }
}

pub async fn run(
    ctx: &Ctx,
    stores: &[Store],
    rounds: Option<usize>,
    requests: Option<usize>,
) -> anyhow::Result<Routes> {
    let rounds = rounds.unwrap_or(if ctx.quick { 2 } else { 8 });
    let requests = requests.unwrap_or(if ctx.quick { 20_000 } else { 60_000 });
    let mut out = Routes::default();
    let select = tokio::task::spawn_blocking({
        let (opts, secs) = (ctx.gw.clone(), ctx.secs(10, 2));
        move || route_select::measure(&opts, secs)
    })
    .await??;
    println!("  {}", select.line());
    out.select = Some(select);
    for &store in stores.iter().filter(|s| **s != Store::None) {
        out.ingest.push(ingest(ctx, store, rounds, requests).await?);
    }
    Ok(out)
}

async fn ingest(
    ctx: &Ctx,
    store: Store,
    rounds: usize,
    requests: usize,
) -> anyhow::Result<RouteIngest> {
    let (url, db, store_settings) = match store {
        Store::Sqlite => {
            std::fs::create_dir_all(&ctx.gw.work_dir)?;
            let name = "routes.db".to_owned();
            let settings = "SQLite, the gateway's default (WAL, synchronous=FULL)".to_owned();
            (ctx.sqlite_url(&name), name, settings)
        }
        Store::None => bail!("no store to ingest into"),
        Store::Postgres => {
            let db = ctx.pg.create_db("routes").await?;
            let mut settings = Vec::new();
            for name in ["shared_buffers", "max_wal_size", "synchronous_commit"] {
                let value = ctx.pg.setting(name).await.unwrap_or_default();
                settings.push(format!("{name}={value}"));
            }
            let settings = format!(
                "PostgreSQL {} ({})",
                ctx.pg.setting("server_version").await.unwrap_or_default(),
                settings.join(", ")
            );
            (ctx.pg.url(&db), db, settings)
        }
    };
    println!("  ingest on {store_settings}");
    let result = measure(ctx, store, &url, rounds, requests).await;
    match store {
        Store::Sqlite => {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(ctx.gw.work_dir.join(format!("{db}{suffix}")));
            }
        }
        _ => ctx.pg.drop_db(&db).await,
    }
    let (legs, rounds_ratio) = result?;
    let filtered_to_plain = legs[1].throughput / legs[0].throughput.max(1e-9);
    println!(
        "  => filtered {:.0} events/s / plain {:.0} events/s = {filtered_to_plain:.3}x (rounds: {}); gateway CPU {:.1} vs {:.1} µs/event",
        legs[1].throughput,
        legs[0].throughput,
        rounds_ratio
            .iter()
            .map(|x| format!("{x:.3}"))
            .collect::<Vec<_>>()
            .join(", "),
        legs[1].cpu_us_per_event,
        legs[0].cpu_us_per_event
    );
    Ok(RouteIngest {
        store: match store {
            Store::Sqlite => "sqlite",
            _ => "pg",
        }
        .into(),
        store_settings,
        concurrency: ctx.concurrency,
        requests_per_segment: requests,
        rounds,
        routes: ROUTES,
        legs,
        filtered_to_plain,
        filtered_to_plain_rounds: rounds_ratio,
    })
}

/// The two legs on one gateway: warm-up, alternated rounds, then the store's counts.
async fn measure(
    ctx: &Ctx,
    store: Store,
    url: &str,
    rounds: usize,
    requests: usize,
) -> anyhow::Result<(Vec<RouteLeg>, Vec<f64>)> {
    let cfg = route_load::gw_config(url, ctx.gw.max_in_flight);
    let tag = match store {
        Store::Sqlite => "routes-sqlite",
        _ => "routes-pg",
    };
    let gw = Gateway::start(&ctx.gw, &cfg, Role::Api, tag).await?;
    let mut legs = vec![
        RouteLeg {
            name: "plain".into(),
            source: PLAIN_SOURCE.into(),
            routing: "destinations = [\"sink\"]".into(),
            ..Default::default()
        },
        RouteLeg {
            name: "filtered".into(),
            source: ROUTED_SOURCE.into(),
            routing: format!(
                "{ROUTES} [[sources.routes]], each event_types = [glob] and a match on data.object, to {ROUTES} destinations"
            ),
            ..Default::default()
        },
    ];
    for leg in &legs {
        let (r, _) = segment(ctx, &leg.source, &gw, (requests / 4).max(1)).await?;
        println!("    warm-up {:>8}: {}", leg.name, r.line());
        r.warm_up_ok(&leg.name, &gw.log)?;
    }
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            vec![0, 1]
        } else {
            vec![1, 0]
        };
        for i in order {
            let leg = &mut legs[i];
            let (r, cpu_s) = segment(ctx, &leg.source, &gw, requests).await?;
            let cpu_us = cpu_s * 1e6 / r.ok_2xx.max(1) as f64;
            println!(
                "    round {round} {:>8}: {}; gateway CPU {cpu_us:.1} µs/event",
                leg.name,
                r.line()
            );
            leg.cpu_us_per_event += cpu_s;
            leg.cpu_us_per_event_segments.push(cpu_us);
            leg.non_2xx += r.non_2xx;
            leg.conn_errors += r.conn_errors;
            leg.segments.push(Segment {
                round,
                ok_2xx: r.ok_2xx,
                seconds: r.duration_s,
                throughput: r.throughput,
                p50_ms: r.latency.p50_ms,
                p99_ms: r.latency.p99_ms,
                cpu: None,
            });
        }
    }
    gw.stop().await?;
    for leg in &mut legs {
        let ok: u64 = leg.segments.iter().map(|s| s.ok_2xx).sum();
        let secs: f64 = leg.segments.iter().map(|s| s.seconds).sum();
        leg.throughput = ok as f64 / secs.max(1e-9);
        // Summed as seconds above.
        leg.cpu_us_per_event = leg.cpu_us_per_event * 1e6 / ok.max(1) as f64;
    }
    let per_round = legs[1]
        .segments
        .iter()
        .zip(&legs[0].segments)
        .map(|(f, p)| f.throughput / p.throughput.max(1e-9))
        .collect();
    let (events, jobs) = counts(store, url).await?;
    for leg in &mut legs {
        leg.events = events.get(&leg.source).copied().unwrap_or(0);
        for ((source, destination), n) in &jobs {
            if *source == leg.source {
                leg.jobs += n;
                leg.jobs_by_destination.insert(destination.clone(), *n);
            }
        }
        println!(
            "    {:>8}: {} events stored, {} jobs ({})",
            leg.name,
            leg.events,
            leg.jobs,
            leg.jobs_by_destination
                .iter()
                .map(|(d, n)| format!("{d} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok((legs, per_round))
}

/// `count` prebuilt requests to `source` at the fixed concurrency, to the end; and the CPU
/// seconds the gateway used meanwhile.
async fn segment(
    ctx: &Ctx,
    source: &str,
    gw: &Gateway,
    count: usize,
) -> anyhow::Result<(LoadReport, f64)> {
    let addr = gw.addr();
    let (spec, body_size) = (route_load::source(source), ctx.body_size);
    let prebuilt = tokio::task::spawn_blocking(move || {
        route_load::requests(&addr.to_string(), &spec, count, body_size)
    })
    .await?;
    let cpu_before = gw.cpu_seconds();
    let report = loadgen::run(LoadSpec {
        addr,
        more_addrs: Vec::new(),
        sources: Vec::new(),
        mode: Mode::Concurrency(ctx.concurrency),
        duration: Duration::from_secs(600),
        ids: Ids::fresh(),
        body_size,
        keep_ids: false,
        prebuilt: Some(Arc::new(prebuilt)),
    })
    .await
    .report;
    let cpu = match (cpu_before, gw.cpu_seconds()) {
        (Some(a), Some(b)) => b - a,
        _ => 0.0,
    };
    Ok((report, cpu))
}

type EventCounts = BTreeMap<String, u64>;
type JobCounts = BTreeMap<(String, String), u64>;

const EVENTS_SQL: &str = "SELECT source, count(*) FROM events GROUP BY source";
const JOBS_SQL: &str = "SELECT e.source, j.destination, count(*) FROM jobs j \
                        JOIN events e ON e.id = j.event_id GROUP BY e.source, j.destination";

/// Events per source and jobs per (source, destination) in the store.
async fn counts(store: Store, url: &str) -> anyhow::Result<(EventCounts, JobCounts)> {
    type Rows = (Vec<(String, i64)>, Vec<(String, String, i64)>);
    let (events, jobs): Rows = match store {
        Store::Sqlite => {
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(1)
                .connect(url)
                .await?;
            let e = sqlx::query_as(EVENTS_SQL).fetch_all(&pool).await?;
            let j = sqlx::query_as(JOBS_SQL).fetch_all(&pool).await?;
            pool.close().await;
            (e, j)
        }
        _ => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(url)
                .await?;
            let e = sqlx::query_as(EVENTS_SQL).fetch_all(&pool).await?;
            let j = sqlx::query_as(JOBS_SQL).fetch_all(&pool).await?;
            pool.close().await;
            (e, j)
        }
    };
    let n = |c: i64| u64::try_from(c).unwrap_or(0);
    Ok((
        events.into_iter().map(|(s, c)| (s, n(c))).collect(),
        jobs.into_iter().map(|(s, d, c)| ((s, d), n(c))).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leg(name: &str, throughput: f64, events: u64, jobs: u64) -> RouteLeg {
        RouteLeg {
            name: name.into(),
            throughput,
            events,
            jobs,
            ..Default::default()
        }
    }

    #[test]
    fn the_row_is_met_only_at_the_target_with_one_job_per_event() {
        let run = |filtered: f64, jobs: u64| RouteIngest {
            store: "pg".into(),
            rounds: 4,
            routes: ROUTES,
            legs: vec![
                leg("plain", 10_000.0, 100, 100),
                leg("filtered", filtered, 100, jobs),
            ],
            filtered_to_plain: filtered / 10_000.0,
            filtered_to_plain_rounds: vec![0.9, 1.0],
            ..Default::default()
        };
        let row = |r: RouteIngest| {
            let mut s = String::new();
            r.table_row(&mut s);
            s
        };
        let ok = row(run(9_700.0, 100));
        assert!(ok.contains("| 0.970× | yes |"), "{ok}");
        assert!(ok.contains("one job per event on both"), "{ok}");
        assert!(row(run(9_400.0, 100)).ends_with("| **no** |\n"));
        let missing = row(run(9_900.0, 90));
        assert!(missing.ends_with("| **no** |\n"), "{missing}");
        assert!(missing.contains("filtered 90/100"), "{missing}");
    }
}
