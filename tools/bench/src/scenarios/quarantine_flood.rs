//! What a flood of badly signed requests costs valid ingest with the quarantine on. Three
//! gateways (role `api`), each on its own store, run side by side: one with the quarantine
//! on (small bounds, so eviction runs), one with `[quarantine] enabled = false`, and a third
//! (quarantine on) that takes only the valid load. Three legs alternate in rounds (forward,
//! then backward): valid Stripe ingest alone on the third gateway; the same valid load while
//! a second load generator floods the quarantine-on gateway with requests signed with a
//! wrong secret at a fixed rate; and the same valid load and flood on the quarantine-off
//! gateway. The two flooded gateways' stores so grow alike: a leg that ingested into a
//! store twice the size of the other's would pay for the size, not for the quarantine. The
//! flood's rate is above the source's admission (64 requests/s, bursts of 512) and the
//! writer's pace, so the admission's and the queue's drops are part of what is measured.
//! Valid requests are built and signed before each segment (as in `routes`); the flood is
//! signed as it is sent, the same work on both flood legs. Segments are timed (both load
//! generators run for the same span), not counted, so the flood covers the whole segment.
//! Afterwards the quarantine-on store's table must hold no more per source than its bounds.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::bail;

use super::quarantine_result::{
    self as result, FloodLeg, FloodStore, KeptRows, QuarantineFlood, ALONE, QUARANTINED,
    UNQUARANTINED,
};
use super::signatures::{Segment, Store};
use super::Ctx;
use crate::gateway::{Gateway, GwConfig, Role};
use crate::http1::Conn;
use crate::loadgen::{self, Ids, LoadReport, LoadSpec, Mode};
use crate::payload::{Scheme, SourceSpec};

/// The source the flood goes to: the one the valid load uses, as an attacker or a
/// misconfigured sender would.
pub const FLOOD_SOURCE: &str = "stripe";
/// Not the source's secret: every flood request fails verification (invalid_signature).
const WRONG_SECRET: &str = "whsec_not_the_bench_stripe_secret_987654";
/// The quarantine-on gateway's bounds: small, so the run reaches them and evicts.
pub const MAX_PER_SOURCE: i64 = 500;
pub const MAX_BYTES_PER_SOURCE: i64 = 1024 * 1024;
/// A pause between segments: the writer drains what it admitted before the next leg, so one leg's flood work does not fall on another leg.
const SETTLE: Duration = Duration::from_millis(1_500);

/// The scenario's sizes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub flood_rate: f64,
    pub rounds: usize,
    pub seconds: u64,
}

/// `[quarantine]` of the two gateways.
pub fn quarantine_toml(enabled: bool) -> String {
    if enabled {
        format!(
            "[quarantine]\nenabled = true\nmax_per_source = {MAX_PER_SOURCE}\nmax_bytes_per_source = {MAX_BYTES_PER_SOURCE}\n"
        )
    } else {
        "[quarantine]\nenabled = false\n".to_owned()
    }
}

pub fn gw_config(db_url: &str, quarantine: bool) -> GwConfig {
    let mut cfg = GwConfig::new(db_url, super::route_load::NO_SINK);
    cfg.extra_toml = vec![quarantine_toml(quarantine)];
    cfg
}

pub async fn run(ctx: &Ctx, stores: &[Store], sizes: Sizes) -> anyhow::Result<QuarantineFlood> {
    let mut out = QuarantineFlood::default();
    for &store in stores.iter().filter(|s| **s != Store::None) {
        out.stores.push(on_store(ctx, store, sizes).await?);
    }
    Ok(out)
}

async fn on_store(ctx: &Ctx, store: Store, sizes: Sizes) -> anyhow::Result<FloodStore> {
    let (urls, names, store_settings) = match store {
        Store::Sqlite => {
            std::fs::create_dir_all(&ctx.gw.work_dir)?;
            let names = [
                "quarantine-on.db".to_owned(),
                "quarantine-off.db".to_owned(),
                "quarantine-alone.db".to_owned(),
            ];
            let settings = "SQLite, the gateway's default (WAL, synchronous=FULL)".to_owned();
            (names.clone().map(|n| ctx.sqlite_url(&n)), names, settings)
        }
        Store::None => bail!("no store to ingest into"),
        Store::Postgres => {
            let on = ctx.pg.create_db("quarantine_on").await?;
            let off = ctx.pg.create_db("quarantine_off").await?;
            let alone = ctx.pg.create_db("quarantine_alone").await?;
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
            let urls = [ctx.pg.url(&on), ctx.pg.url(&off), ctx.pg.url(&alone)];
            (urls, [on, off, alone], settings)
        }
    };
    println!("  on {store_settings}");
    let result = measure(ctx, store, &urls, sizes).await;
    for db in &names {
        match store {
            Store::Sqlite => {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(ctx.gw.work_dir.join(format!("{db}{suffix}")));
                }
            }
            _ => ctx.pg.drop_db(db).await,
        }
    }
    let mut s = result?;
    s.store = match store {
        Store::Sqlite => "sqlite",
        _ => "pg",
    }
    .into();
    s.store_settings = store_settings;
    println!(
        "  => flood+quarantine {:.0} / flood, no quarantine {:.0} valid events/s = {:.3}x (rounds: {}); / no flood {:.0} = {:.3}x",
        s.legs[QUARANTINED].throughput,
        s.legs[UNQUARANTINED].throughput,
        s.quarantined_to_unquarantined,
        crate::stats::ratios_line(&s.quarantined_to_unquarantined_rounds),
        s.legs[ALONE].throughput,
        s.quarantined_to_alone,
    );
    Ok(s)
}

/// The three legs on the three gateways: warm-up, alternated rounds, then the stores' tables.
async fn measure(
    ctx: &Ctx,
    store: Store,
    urls: &[String; 3],
    sizes: Sizes,
) -> anyhow::Result<FloodStore> {
    let tag = match store {
        Store::Sqlite => "sqlite",
        _ => "pg",
    };
    let on = Gateway::start(
        &ctx.gw,
        &gw_config(&urls[0], true),
        Role::Api,
        &format!("quarantine-on-{tag}"),
    )
    .await?;
    let off = Gateway::start(
        &ctx.gw,
        &gw_config(&urls[1], false),
        Role::Api,
        &format!("quarantine-off-{tag}"),
    )
    .await?;
    let alone = Gateway::start(
        &ctx.gw,
        &gw_config(&urls[2], true),
        Role::Api,
        &format!("quarantine-alone-{tag}"),
    )
    .await?;
    // The leg's gateway: the flooded legs by whether the quarantine is on, the valid load
    // alone on its own.
    let gateway_of = |leg: &FloodLeg| match (leg.flood, leg.quarantine) {
        (false, _) => &alone,
        (true, true) => &on,
        (true, false) => &off,
    };
    let mut legs: Vec<FloodLeg> = [
        ("alone", true, false),
        ("flood+quarantine", true, true),
        ("flood, no quarantine", false, true),
    ]
    .into_iter()
    .map(|(name, quarantine, flood)| FloodLeg {
        name: name.into(),
        quarantine,
        flood,
        ..Default::default()
    })
    .collect();
    let seconds = Duration::from_secs(sizes.seconds);
    // Prebuilt requests must outlast a segment; the fastest rate seen so far sizes them.
    let mut fastest = 5_000.0_f64;
    for leg in &legs {
        let gw = gateway_of(leg);
        let (r, flood, _) = segment(ctx, gw, leg.flood, seconds / 2, fastest, sizes).await?;
        println!("    warm-up {:>20}: {}", leg.name, r.line());
        if let Some(f) = &flood {
            println!("    {:>28} {}", "flood:", f.line());
        }
        r.warm_up_ok(&leg.name, &gw.log)?;
        fastest = fastest.max(r.throughput);
    }
    for round in 0..sizes.rounds {
        let mut order = vec![ALONE, QUARANTINED, UNQUARANTINED];
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let gw = gateway_of(&legs[i]);
            let leg = &mut legs[i];
            let (r, flood, cpu_s) = segment(ctx, gw, leg.flood, seconds, fastest, sizes).await?;
            fastest = fastest.max(r.throughput);
            let cpu_us = cpu_s * 1e6 / r.ok_2xx.max(1) as f64;
            println!(
                "    round {round} {:>20}: {}; gateway CPU {cpu_us:.1} µs/valid event",
                leg.name,
                r.line()
            );
            if r.duration_s < seconds.as_secs_f64() * 0.95 {
                println!(
                    "      (the prebuilt requests ran out after {:.1} s)",
                    r.duration_s
                );
            }
            leg.cpu_seconds += cpu_s;
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
            if let Some(f) = flood {
                println!("    {:>28} {}", "flood:", f.line());
                leg.flood_answered += f.ok_2xx + f.non_2xx;
                leg.flood_conn_errors += f.conn_errors;
                for (status, n) in f.statuses {
                    *leg.flood_statuses.entry(status).or_default() += n;
                }
            }
        }
    }
    let outcomes = match metrics(on.addr()).await {
        Ok(text) => result::outcomes(&text),
        Err(e) => {
            println!("    (the quarantine-on gateway's /metrics could not be read: {e:#})");
            BTreeMap::new()
        }
    };
    on.stop().await?;
    off.stop().await?;
    alone.stop().await?;
    for leg in &mut legs {
        result::pool(leg);
    }
    let kept = kept_rows(store, &urls[0]).await?;
    let kept_off = kept_rows(store, &urls[1])
        .await?
        .iter()
        .map(|k| k.rows)
        .sum();
    for k in &kept {
        println!(
            "    quarantine kept: {} {} rows, {} body bytes (bounds {MAX_PER_SOURCE} rows, {MAX_BYTES_PER_SOURCE} bytes)",
            k.source, k.rows, k.body_bytes
        );
    }
    println!("    quarantine-off store: {kept_off} rows; outcomes {outcomes:?}");
    let (q_u, q_u_rounds) = result::ratios(&legs[QUARANTINED], &legs[UNQUARANTINED]);
    let (q_a, q_a_rounds) = result::ratios(&legs[QUARANTINED], &legs[ALONE]);
    Ok(FloodStore {
        concurrency: ctx.concurrency,
        flood_rate: sizes.flood_rate,
        flood_source: FLOOD_SOURCE.into(),
        seconds_per_segment: seconds.as_secs_f64(),
        rounds: sizes.rounds,
        max_per_source: MAX_PER_SOURCE,
        max_bytes_per_source: MAX_BYTES_PER_SOURCE,
        quarantined_to_unquarantined: q_u,
        quarantined_to_unquarantined_rounds: q_u_rounds,
        quarantined_to_alone: q_a,
        quarantined_to_alone_rounds: q_a_rounds,
        flood_cpu_us_per_request_unquarantined: result::flood_cpu_us_per_request(
            &legs[UNQUARANTINED],
            &legs[ALONE],
        ),
        flood_cpu_us_per_request_quarantined: result::flood_cpu_us_per_request(
            &legs[QUARANTINED],
            &legs[ALONE],
        ),
        kept,
        kept_with_quarantine_off: kept_off,
        outcomes,
        legs,
        ..Default::default()
    })
}

/// One segment on `gw`: the valid load at the fixed concurrency for `length`, with the flood
/// beside it when `flood`; then a pause. Returns the valid load's report, the flood's, and
/// the CPU seconds the gateway used meanwhile.
async fn segment(
    ctx: &Ctx,
    gw: &Gateway,
    flood: bool,
    length: Duration,
    fastest: f64,
    sizes: Sizes,
) -> anyhow::Result<(LoadReport, Option<LoadReport>, f64)> {
    let addr = gw.addr();
    let body_size = ctx.body_size;
    let valid = super::stripe_load(ctx, addr, length, fastest).await?;
    let bad = LoadSpec {
        addr,
        more_addrs: Vec::new(),
        sources: vec![flood_source()],
        mode: Mode::Rate {
            per_sec: sizes.flood_rate,
            connections: ctx.rate_connections,
        },
        duration: length,
        ids: Ids::fresh(),
        body_size,
        keep_ids: false,
        prebuilt: None,
    };
    let cpu_before = gw.cpu_seconds();
    let (report, flood_report) = if flood {
        let (v, f) = tokio::join!(loadgen::run(valid), loadgen::run(bad));
        (v.report, Some(f.report))
    } else {
        (loadgen::run(valid).await.report, None)
    };
    let cpu = match (cpu_before, gw.cpu_seconds()) {
        (Some(a), Some(b)) => b - a,
        _ => 0.0,
    };
    tokio::time::sleep(SETTLE).await;
    Ok((report, flood_report, cpu))
}

/// The flood's sender: the Stripe source's name and scheme, a wrong secret.
fn flood_source() -> SourceSpec {
    SourceSpec {
        name: FLOOD_SOURCE.into(),
        scheme: Scheme::Stripe,
        secret: WRONG_SECRET.into(),
    }
}

/// The gateway's `/metrics` text.
async fn metrics(addr: std::net::SocketAddr) -> anyhow::Result<String> {
    let mut conn = Conn::connect(addr).await?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let response = conn.round_trip(request.as_bytes(), true).await?;
    anyhow::ensure!(
        response.status == 200,
        "GET /metrics answered {}",
        response.status
    );
    Ok(String::from_utf8_lossy(&response.body).into_owned())
}

const KEPT_SQL: &str = "SELECT source, count(*), CAST(COALESCE(SUM(body_bytes), 0) AS BIGINT) \
                        FROM quarantine GROUP BY source ORDER BY source";

/// Rows and body bytes per source in a store's quarantine table.
async fn kept_rows(store: Store, url: &str) -> anyhow::Result<Vec<KeptRows>> {
    let rows: Vec<(String, i64, i64)> = match store {
        Store::Sqlite => {
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(1)
                .connect(url)
                .await?;
            let r = sqlx::query_as(KEPT_SQL).fetch_all(&pool).await?;
            pool.close().await;
            r
        }
        _ => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(url)
                .await?;
            let r = sqlx::query_as(KEPT_SQL).fetch_all(&pool).await?;
            pool.close().await;
            r
        }
    };
    let n = |c: i64| u64::try_from(c).unwrap_or(0);
    Ok(rows
        .into_iter()
        .map(|(source, rows, bytes)| KeptRows {
            source,
            rows: n(rows),
            body_bytes: n(bytes),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use hookgate::config::{GatewayConfig, Settings};

    use super::*;
    use crate::gateway::render_toml;
    use crate::scenarios::route_load::tests::opts;

    fn config(quarantine: bool) -> GatewayConfig {
        let text = render_toml(&opts(), &gw_config("sqlite://unused.db", quarantine));
        let settings = Settings::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        GatewayConfig::from_settings(&settings).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    #[test]
    fn the_two_gateways_differ_by_the_quarantine_alone() {
        let on = config(true);
        assert!(on.quarantine.enabled);
        assert_eq!(on.quarantine.max_per_source, MAX_PER_SOURCE);
        assert_eq!(on.quarantine.max_bytes_per_source, MAX_BYTES_PER_SOURCE);
        let off = config(false);
        assert!(!off.quarantine.enabled);
        assert!(on.sources.contains_key(FLOOD_SOURCE) && off.sources.contains_key(FLOOD_SOURCE));
        assert_eq!(on.sources.len(), off.sources.len());
    }

    #[test]
    fn the_flood_is_signed_with_another_secret_than_the_source_has() {
        let valid = super::super::stripe_only().remove(0);
        assert_eq!(valid.name, flood_source().name);
        assert_ne!(valid.secret, flood_source().secret);
        let reqs = crate::scenarios::stripe_requests("h:1", 2, 512);
        let text = String::from_utf8(reqs[0].clone()).unwrap();
        assert!(
            text.starts_with("POST /webhooks/stripe HTTP/1.1\r\n"),
            "{text}"
        );
        assert_ne!(reqs[0], reqs[1]);
    }
}
