//! Hand-off to brokers: a worker-only gateway drains a backlog of pending jobs (bulk-seeded
//! with SQL, PostgreSQL) to a NATS JetStream stream and to a RabbitMQ exchange, each side by
//! side with the broker's own ceiling on this machine: a plain publish-and-await-ack loop with
//! the same client crate, message size and concurrency, run before and after the gateway so
//! drift on a noisy machine shows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation, Connection, ConnectionProperties, ExchangeKind};
use serde::{Deserialize, Serialize};

use super::Ctx;
use crate::gateway::{self, Gateway, GwConfig, Role};
use crate::pg::{self, Seed};

pub const NATS_URL: &str = "nats://127.0.0.1:4222";
pub const AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BrokerRun {
    pub broker: String,
    pub jobs: u64,
    pub concurrency: usize,
    pub message_bytes: usize,
    /// The plain loop before and after the gateway, messages acknowledged per second.
    pub ceiling_before: f64,
    pub ceiling_after: f64,
    /// Jobs succeeded per second, from the worker's start to the last outcome.
    pub gateway_per_s: f64,
    pub complete: bool,
    /// Messages the broker holds after the gateway's drain (one per job expected).
    pub broker_messages: u64,
    /// gateway over the mean of the two ceilings.
    pub ratio: f64,
    /// Machine-wide CPU time (every process: the gateway, PostgreSQL, the broker, the loop)
    /// per message, in the plain loop (mean of both) and in the gateway's drain: on a machine
    /// whose cores are all busy, the ratio of these bounds the ratio of the rates.
    pub machine_cpu_us_per_loop_message: f64,
    pub machine_cpu_us_per_gateway_job: f64,
    /// The gateway process's own CPU time per job.
    pub gateway_cpu_us_per_job: f64,
    /// Cores busy, on average, during the gateway's drain.
    pub cores_busy_in_drain: f64,
}

/// What one measured leg cost: messages per second and machine CPU per message.
struct Leg {
    per_s: f64,
    cpu_us_per_message: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Brokers {
    pub runs: Vec<BrokerRun>,
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Brokers> {
    let jobs = if ctx.quick { 10_000 } else { 100_000 };
    let concurrency = ctx.gw.max_in_flight.min(ctx.gw.worker_concurrency);
    let mut out = Brokers::default();
    for broker in [Broker::Nats, Broker::RabbitMq] {
        println!("  {}: {jobs} jobs, {concurrency} in flight", broker.name());
        out.runs.push(one(ctx, broker, jobs, concurrency).await?);
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy)]
enum Broker {
    Nats,
    RabbitMq,
}

impl Broker {
    fn name(self) -> &'static str {
        match self {
            Self::Nats => "nats-jetstream",
            Self::RabbitMq => "rabbitmq",
        }
    }
}

/// What one run publishes to, made for it and removed after.
struct Target {
    id: String,
}

impl Target {
    fn new() -> Self {
        Self {
            id: uuid::Uuid::now_v7().simple().to_string(),
        }
    }
    fn stream(&self) -> String {
        format!("BENCH_{}", self.id)
    }
    fn subject_prefix(&self) -> String {
        format!("bench.{}", self.id)
    }
    fn exchange(&self) -> String {
        format!("bench.{}", self.id)
    }

    async fn create(&self, broker: Broker) -> anyhow::Result<()> {
        match broker {
            Broker::Nats => {
                let js = jetstream::new(async_nats::connect(NATS_URL).await?);
                js.create_stream(jetstream::stream::Config {
                    name: self.stream(),
                    subjects: vec![format!("{}.>", self.subject_prefix())],
                    duplicate_window: Duration::from_secs(120),
                    max_age: Duration::from_secs(3600),
                    ..Default::default()
                })
                .await?;
            }
            Broker::RabbitMq => {
                let c = Connection::connect(AMQP_URL, ConnectionProperties::default()).await?;
                let ch = c.create_channel().await?;
                let name = self.exchange();
                ch.exchange_declare(
                    name.as_str().into(),
                    ExchangeKind::Topic,
                    ExchangeDeclareOptions {
                        durable: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await?;
                ch.queue_declare(
                    name.as_str().into(),
                    QueueDeclareOptions {
                        durable: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await?;
                ch.queue_bind(
                    name.as_str().into(),
                    name.as_str().into(),
                    "#".into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
                let _ = c.close(200, "OK".into()).await;
            }
        }
        Ok(())
    }

    async fn messages(&self, broker: Broker) -> anyhow::Result<u64> {
        Ok(match broker {
            Broker::Nats => {
                let js = jetstream::new(async_nats::connect(NATS_URL).await?);
                js.get_stream(self.stream())
                    .await?
                    .info()
                    .await?
                    .state
                    .messages
            }
            Broker::RabbitMq => {
                let c = Connection::connect(AMQP_URL, ConnectionProperties::default()).await?;
                let ch = c.create_channel().await?;
                let q = ch
                    .queue_declare(
                        self.exchange().as_str().into(),
                        QueueDeclareOptions {
                            passive: true,
                            ..Default::default()
                        },
                        FieldTable::default(),
                    )
                    .await?;
                let _ = c.close(200, "OK".into()).await;
                u64::from(q.message_count())
            }
        })
    }

    async fn remove(&self, broker: Broker) {
        match broker {
            Broker::Nats => {
                if let Ok(c) = async_nats::connect(NATS_URL).await {
                    let _ = jetstream::new(c).delete_stream(self.stream()).await;
                }
            }
            Broker::RabbitMq => {
                if let Ok(c) = Connection::connect(AMQP_URL, ConnectionProperties::default()).await
                {
                    if let Ok(ch) = c.create_channel().await {
                        let name = self.exchange();
                        let _ = ch
                            .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                            .await;
                        let _ = ch
                            .exchange_delete(name.as_str().into(), ExchangeDeleteOptions::default())
                            .await;
                    }
                    let _ = c.close(200, "OK".into()).await;
                }
            }
        }
    }
}

async fn one(
    ctx: &Ctx,
    broker: Broker,
    jobs: u64,
    concurrency: usize,
) -> anyhow::Result<BrokerRun> {
    let message_bytes = ctx.body_size;
    let ceiling_target = Target::new();
    ceiling_target.create(broker).await?;
    let before = ceiling(broker, &ceiling_target, jobs, concurrency, message_bytes).await;
    ceiling_target.remove(broker).await;
    let before = before?;
    println!(
        "    plain loop: {:.0} acks/s, {:.0} µs machine CPU per message",
        before.per_s, before.cpu_us_per_message
    );

    let target = Target::new();
    target.create(broker).await?;
    let drained = drain(ctx, broker, &target, jobs).await;
    let broker_messages = target.messages(broker).await.unwrap_or(0);
    target.remove(broker).await;
    let drained = drained?;
    println!(
        "    gateway:    {:.0} jobs/s, {:.0} µs machine CPU per job ({:.0} µs in the gateway, {:.2} cores busy), all succeeded: {}, broker holds {broker_messages}",
        drained.leg.per_s,
        drained.leg.cpu_us_per_message,
        drained.gateway_cpu_us_per_job,
        drained.cores_busy,
        drained.complete
    );

    let after_target = Target::new();
    after_target.create(broker).await?;
    let after = ceiling(broker, &after_target, jobs, concurrency, message_bytes).await;
    after_target.remove(broker).await;
    let after = after?;
    println!(
        "    plain loop: {:.0} acks/s, {:.0} µs machine CPU per message",
        after.per_s, after.cpu_us_per_message
    );
    let ratio = drained.leg.per_s / ((before.per_s + after.per_s) / 2.0).max(1e-9);
    println!("  => {}: {ratio:.2}x the plain loop", broker.name());
    Ok(BrokerRun {
        broker: broker.name().into(),
        jobs,
        concurrency,
        message_bytes,
        ceiling_before: before.per_s,
        ceiling_after: after.per_s,
        gateway_per_s: drained.leg.per_s,
        complete: drained.complete,
        broker_messages,
        ratio,
        machine_cpu_us_per_loop_message: (before.cpu_us_per_message + after.cpu_us_per_message)
            / 2.0,
        machine_cpu_us_per_gateway_job: drained.leg.cpu_us_per_message,
        gateway_cpu_us_per_job: drained.gateway_cpu_us_per_job,
        cores_busy_in_drain: drained.cores_busy,
    })
}

/// `concurrency` tasks, each publishing and awaiting the acknowledgement in turn, until
/// `count` messages are acknowledged; acks per second.
async fn ceiling(
    broker: Broker,
    target: &Target,
    count: u64,
    concurrency: usize,
    size: usize,
) -> anyhow::Result<Leg> {
    let body = bytes::Bytes::from(vec![b'x'; size]);
    let next = Arc::new(AtomicU64::new(0));
    let clock = Instant::now();
    let busy_before = crate::cpu::machine_busy_seconds();
    let mut tasks = tokio::task::JoinSet::new();
    match broker {
        Broker::Nats => {
            let js = jetstream::new(async_nats::connect(NATS_URL).await?);
            let subject = format!("{}.stripe.invoice%2Epaid", target.subject_prefix());
            for _ in 0..concurrency {
                let (js, next, body, subject) =
                    (js.clone(), next.clone(), body.clone(), subject.clone());
                tasks.spawn(async move {
                    while next.fetch_add(1, Ordering::Relaxed) < count {
                        let id = uuid::Uuid::now_v7().to_string();
                        let m = jetstream::message::PublishMessage::build()
                            .payload(body.clone())
                            .message_id(id);
                        js.send_publish(subject.clone(), m).await?.await?;
                    }
                    anyhow::Ok(())
                });
            }
        }
        Broker::RabbitMq => {
            let c = Arc::new(Connection::connect(AMQP_URL, ConnectionProperties::default()).await?);
            let ch = c.create_channel().await?;
            ch.confirm_select(ConfirmSelectOptions::default()).await?;
            let exchange = target.exchange();
            for _ in 0..concurrency {
                let (ch, next, body, exchange) =
                    (ch.clone(), next.clone(), body.clone(), exchange.clone());
                tasks.spawn(async move {
                    while next.fetch_add(1, Ordering::Relaxed) < count {
                        let props = BasicProperties::default()
                            .with_delivery_mode(2)
                            .with_message_id(uuid::Uuid::now_v7().to_string().into());
                        let confirm = ch
                            .basic_publish(
                                exchange.as_str().into(),
                                "stripe.invoice%2Epaid".into(),
                                BasicPublishOptions {
                                    mandatory: true,
                                    immediate: false,
                                },
                                &body,
                                props,
                            )
                            .await?
                            .await?;
                        anyhow::ensure!(
                            matches!(confirm, Confirmation::Ack(None)),
                            "not acked: {confirm:?}"
                        );
                    }
                    anyhow::Ok(())
                });
            }
        }
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(Leg {
        per_s: count as f64 / clock.elapsed().as_secs_f64().max(1e-9),
        cpu_us_per_message: (crate::cpu::machine_busy_seconds() - busy_before) * 1e6 / count as f64,
    })
}

/// Seeds `jobs` pending jobs for the `sink` destination, here the broker, and measures a
/// worker-only gateway draining them; (jobs/s, all succeeded).
/// A drain's measurements.
struct Drained {
    leg: Leg,
    gateway_cpu_us_per_job: f64,
    cores_busy: f64,
    complete: bool,
}

async fn drain(ctx: &Ctx, broker: Broker, target: &Target, jobs: u64) -> anyhow::Result<Drained> {
    let db = ctx.pg.create_db("brokers").await?;
    let r = drain_on(ctx, &db, broker, target, jobs).await;
    ctx.pg.drop_db(&db).await;
    r
}

async fn drain_on(
    ctx: &Ctx,
    db: &str,
    broker: Broker,
    target: &Target,
    jobs: u64,
) -> anyhow::Result<Drained> {
    let mut cfg = GwConfig::new(ctx.pg.url(db), "http://127.0.0.1:9/unused");
    cfg.sink_destination = Some(match broker {
        Broker::Nats => format!(
            "kind = \"nats\"\nurl = \"{NATS_URL}\"\nsubject = \"{}.{{source}}.{{event_type}}\"\nstream = \"{}\"",
            target.subject_prefix(),
            target.stream()
        ),
        Broker::RabbitMq => format!(
            "kind = \"rabbitmq\"\nurl = \"{AMQP_URL}\"\nexchange = \"{}\"\nrouting_key = \"{{source}}.{{event_type}}\"",
            target.exchange()
        ),
    });
    gateway::migrate(&ctx.gw, &cfg)?;
    let pool = ctx.pg.pool(db, 2).await?;
    let seed = Seed {
        body_size: ctx.body_size,
        job_status: "pending",
    };
    let took = pg::seed(&pool, 0, jobs, 100_000, seed).await?;
    println!("    seeded {jobs} pending jobs in {took:.1} s");
    let gw = Gateway::start(&ctx.gw, &cfg, Role::Worker, "brokers").await?;
    let clock = Instant::now();
    let busy_before = crate::cpu::machine_busy_seconds();
    let gateway_cpu_before = gw.cpu_seconds().unwrap_or(0.0);
    let limit = Duration::from_secs(60 + jobs / 200);
    let mut succeeded = 0;
    while clock.elapsed() < limit {
        // A count over the jobs costs the database: four a second keep it small.
        tokio::time::sleep(Duration::from_millis(250)).await;
        succeeded = pg::count_jobs(&pool, "succeeded").await?;
        if succeeded as u64 >= jobs {
            break;
        }
    }
    let seconds = clock.elapsed().as_secs_f64();
    let busy = crate::cpu::machine_busy_seconds() - busy_before;
    let gateway_cpu = gw.cpu_seconds().unwrap_or(0.0) - gateway_cpu_before;
    gw.stop().await?;
    pool.close().await;
    let done = succeeded.max(1) as f64;
    Ok(Drained {
        leg: Leg {
            per_s: succeeded as f64 / seconds,
            cpu_us_per_message: busy * 1e6 / done,
        },
        gateway_cpu_us_per_job: gateway_cpu * 1e6 / done,
        cores_busy: busy / seconds.max(1e-9),
        complete: succeeded as u64 >= jobs,
    })
}

impl BrokerRun {
    /// The results table's row: the target is 0.7× the plain loop.
    pub fn table_row(&self, s: &mut String) {
        use crate::markdown::rate;
        use std::fmt::Write as _;
        let met = if !self.complete {
            "no (incomplete)"
        } else if self.ratio >= 0.7 {
            "yes"
        } else {
            "no"
        };
        let _ = writeln!(
            s,
            "| Hand-off to {} from a {}-job backlog (PostgreSQL), vs a plain publish-and-await-ack loop ({} in flight, {} B) | ≥ 0.70× | {:.2}× ({} jobs/s; loop {} / {} acks/s before / after; broker holds {}); machine CPU per message {:.0} µs in the loop, {:.0} µs per job in the gateway's drain ({:.0} µs of it the gateway's own, {:.2} cores busy) | | {met} |",
            self.broker,
            rate(self.jobs as f64),
            self.concurrency,
            self.message_bytes,
            self.ratio,
            rate(self.gateway_per_s),
            rate(self.ceiling_before),
            rate(self.ceiling_after),
            rate(self.broker_messages as f64),
            self.machine_cpu_us_per_loop_message,
            self.machine_cpu_us_per_gateway_job,
            self.gateway_cpu_us_per_job,
            self.cores_busy_in_drain,
        );
    }
}
