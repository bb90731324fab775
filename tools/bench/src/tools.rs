//! The load generator and the sink as commands of their own, against any gateway.

use std::net::ToSocketAddrs as _;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use crate::{loadgen, payload, sink as bench_sink};

#[derive(Debug, Args)]
pub struct LoadgenArgs {
    /// The gateway's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// A source to send to, as NAME:SCHEME:SECRET (scheme stripe or github); repeat to
    /// alternate. Default: the bench configuration's `stripe` and `github` sources.
    #[arg(long = "source")]
    pub sources: Vec<String>,
    /// Fixed concurrency (connections sending back to back).
    #[arg(long, conflicts_with = "rate")]
    pub concurrency: Option<usize>,
    /// Fixed rate, requests per second (open loop).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Connections for a fixed-rate run.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    #[arg(long, default_value_t = 512)]
    pub body_size: usize,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn loadgen(a: LoadgenArgs) -> anyhow::Result<()> {
    let hostport = a
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let addr = hostport
        .to_socket_addrs()
        .with_context(|| format!("resolving {hostport}"))?
        .next()
        .context("no address")?;
    let sources = if a.sources.is_empty() {
        payload::bench_sources()
    } else {
        a.sources
            .iter()
            .map(|s| {
                let mut parts = s.splitn(3, ':');
                let (Some(name), Some(scheme), Some(secret)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    anyhow::bail!("--source is NAME:SCHEME:SECRET, got {s:?}");
                };
                Ok(payload::SourceSpec {
                    name: name.into(),
                    scheme: scheme.parse().map_err(anyhow::Error::msg)?,
                    secret: secret.into(),
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let mode = match (a.concurrency, a.rate) {
        (_, Some(per_sec)) => loadgen::Mode::Rate {
            per_sec,
            connections: a.connections,
        },
        (c, None) => loadgen::Mode::Concurrency(c.unwrap_or(64)),
    };
    let out = loadgen::run(loadgen::LoadSpec {
        addr,
        more_addrs: Vec::new(),
        sources,
        mode,
        duration: a.duration,
        ids: loadgen::Ids::fresh(),
        body_size: a.body_size,
        keep_ids: false,
        prebuilt: None,
    })
    .await;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out.report)?);
    } else {
        println!("{}", out.report.line());
        println!("statuses: {:?}", out.report.statuses);
        if !out.report.stalls.is_empty() {
            println!("slowest windows: {}", out.report.stalls_line());
        }
    }
    Ok(())
}

pub async fn sink(listen: &str, fail_one_in: u64) -> anyhow::Result<()> {
    let s = bench_sink::Sink::start(listen).await?;
    s.state.set_fail_one_in(fail_one_in);
    println!("sink listening on {}", s.url());
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let n = s.state.take_receipts().len();
                if n > 0 {
                    println!("{n} deliveries/s (total 200: {}, 500: {})",
                        s.state.ok.load(std::sync::atomic::Ordering::Relaxed),
                        s.state.failed.load(std::sync::atomic::Ordering::Relaxed));
                }
            }
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}
