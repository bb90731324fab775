//! Ingest (step 1): each layout's statement, batches alternated on two fresh databases, and
//! the insert loop that runs beside a removal.

use super::*;

/// One batch of events, one pending job each, as the gateway binds them.
pub(super) struct Batch {
    ids: Vec<Uuid>,
    tenants: Vec<&'static str>,
    sources: Vec<&'static str>,
    provider_ids: Vec<String>,
    types: Vec<Option<&'static str>>,
    received: Vec<DateTime<Utc>>,
    content_types: Vec<Option<&'static str>>,
    headers: Vec<&'static str>,
    bodies: Vec<Vec<u8>>,
    schemes: Vec<&'static str>,
    secret_indexes: Vec<i32>,
    job_ids: Vec<Uuid>,
    job_destinations: Vec<&'static str>,
    job_tokens: Vec<Option<Uuid>>,
    job_leases: Vec<Option<DateTime<Utc>>>,
    job_keys: Vec<Option<&'static str>>,
    job_holds: Vec<bool>,
    route_digests: Vec<Option<i64>>,
}

pub(super) const HEADERS: &str = "[[\"content-type\",\"application/json\"],[\"user-agent\",\"Stripe/1.0 (+https://stripe.com/docs/webhooks)\"],[\"stripe-signature\",\"t=1765000000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd\"],[\"content-length\",\"512\"]]";

impl Batch {
    fn new(body_size: usize) -> Self {
        let now = Utc::now();
        let mut b = Batch {
            ids: Vec::with_capacity(BATCH),
            tenants: vec!["default"; BATCH],
            sources: vec!["stripe"; BATCH],
            provider_ids: Vec::with_capacity(BATCH),
            types: vec![Some("invoice.paid"); BATCH],
            received: vec![now; BATCH],
            content_types: vec![Some("application/json"); BATCH],
            headers: vec![HEADERS; BATCH],
            bodies: Vec::with_capacity(BATCH),
            schemes: vec!["stripe-v1"; BATCH],
            secret_indexes: vec![0; BATCH],
            job_ids: Vec::with_capacity(BATCH),
            job_destinations: vec!["sink"; BATCH],
            job_tokens: vec![None; BATCH],
            job_leases: vec![None; BATCH],
            job_keys: vec![None; BATCH],
            job_holds: vec![false; BATCH],
            route_digests: vec![Some(0x5eed); BATCH],
        };
        for _ in 0..BATCH {
            let event = hookgate::domain::EventId::generate();
            b.ids.push(event.as_uuid());
            b.job_ids
                .push(hookgate::domain::JobId::for_event(event).as_uuid());
            let pid = format!("evt_{:024x}", fastrand::u128(..) >> 32);
            let mut body = format!("{{\"id\":\"{pid}\",\"type\":\"invoice.paid\",\"pad\":\"");
            while body.len() + 2 < body_size {
                body.push('x');
            }
            body.push_str("\"}");
            b.bodies.push(body.into_bytes());
            b.provider_ids.push(pid);
        }
        b
    }

    async fn insert(&self, conn: &mut sqlx::PgConnection, sql: &str) -> anyhow::Result<()> {
        let rows: Vec<(Uuid, bool)> = sqlx::query_as(sql)
            .bind(&self.ids)
            .bind(&self.tenants)
            .bind(&self.sources)
            .bind(&self.provider_ids)
            .bind(&self.types)
            .bind(&self.received)
            .bind(&self.content_types)
            .bind(&self.headers)
            .bind(&self.bodies)
            .bind(&self.schemes)
            .bind(&self.secret_indexes)
            .bind(&self.job_ids)
            .bind(&self.ids)
            .bind(&self.job_destinations)
            .bind(&self.received)
            .bind(&self.job_tokens)
            .bind(&self.job_leases)
            .bind(&self.route_digests)
            .bind(&self.received)
            .bind(&self.job_keys)
            .bind(&self.job_holds)
            .fetch_all(conn)
            .await?;
        anyhow::ensure!(rows.len() == BATCH, "a batch stored {} events", rows.len());
        Ok(())
    }
}

/// Statement latencies of an insert loop, each with its start and end.
type Timed = Vec<(Instant, Instant)>;

/// `WRITERS` connections inserting batches of `layout`'s statement until `stop`: flat out,
/// or one batch every `every` per writer.
pub(super) async fn insert_loop(
    pool: &PgPool,
    layout: Layout,
    body_size: usize,
    every: Option<Duration>,
    stop: Arc<tokio::sync::watch::Receiver<bool>>,
) -> anyhow::Result<Timed> {
    let mut tasks = Vec::new();
    for _ in 0..WRITERS {
        let pool = pool.clone();
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = pool.acquire().await?;
            let mut timed = Timed::new();
            let mut next = tokio::time::Instant::now();
            while !*stop.borrow() {
                let batch = Batch::new(body_size);
                if let Some(every) = every {
                    tokio::time::sleep_until(next).await;
                    next += every;
                }
                let start = Instant::now();
                batch.insert(&mut conn, layout.insert_sql()).await?;
                timed.push((start, Instant::now()));
            }
            Ok::<_, anyhow::Error>(timed)
        }));
    }
    let mut all = Timed::new();
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(all)
}

/// Runs the loop for `len` and returns its statements.
pub(super) async fn loop_for(
    pool: &PgPool,
    layout: Layout,
    body_size: usize,
    every: Option<Duration>,
    len: Duration,
) -> anyhow::Result<Timed> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let run = insert_loop(pool, layout, body_size, every, Arc::new(rx));
    let timer = async {
        tokio::time::sleep(len).await;
        let _ = tx.send(true);
    };
    let (timed, ()) = tokio::join!(run, timer);
    timed
}

pub(super) fn summary<'a>(timed: impl Iterator<Item = &'a (Instant, Instant)>) -> LatencySummary {
    let mut s = Samples::default();
    for (a, b) in timed {
        s.record(*b - *a);
    }
    s.summary()
}

pub(super) async fn ingest(ctx: &Ctx) -> anyhow::Result<IngestCompare> {
    let rounds = if ctx.quick { 2 } else { 6 };
    let segment = ctx.secs(10, 3);
    let mut out = IngestCompare {
        batch: BATCH,
        writers: WRITERS,
        segment_seconds: segment.as_secs(),
        rounds,
        ..Default::default()
    };
    let mut dbs = Vec::new();
    for layout in [Layout::Unpartitioned, Layout::Partitioned] {
        let db = ctx
            .pg
            .create_db(&format!("ingest_{}", layout.name()))
            .await?;
        dbs.push(db);
    }
    let r = async {
        let old = prepare(ctx, &dbs[0], Layout::Unpartitioned, first_day()).await?;
        let new = prepare(ctx, &dbs[1], Layout::Partitioned, first_day()).await?;
        let mut sides = [
            (Layout::Unpartitioned, &old, Timed::new(), 0.0, Vec::new()),
            (Layout::Partitioned, &new, Timed::new(), 0.0, Vec::new()),
        ];
        for side in &sides {
            let warm = loop_for(side.1, side.0, ctx.body_size, None, segment / 3).await?;
            println!("    warm-up {}: {} statements", side.0.name(), warm.len());
        }
        for round in 0..rounds {
            // Forward, then backward: neither layout always goes first.
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let (layout, pool, timed, secs, per_round) = &mut sides[i];
                let clock = Instant::now();
                let t = loop_for(pool, *layout, ctx.body_size, None, segment).await?;
                let elapsed = clock.elapsed().as_secs_f64();
                let rate = (t.len() * BATCH) as f64 / elapsed;
                println!(
                    "    round {} {}: {:.0} events/s",
                    round + 1,
                    layout.name(),
                    rate
                );
                per_round.push(rate);
                *secs += elapsed;
                timed.extend(t);
            }
        }
        for (i, (layout, _, timed, secs, per_round)) in sides.into_iter().enumerate() {
            let events = (timed.len() * BATCH) as u64;
            let side = IngestSide {
                layout,
                events,
                seconds: secs,
                events_per_s: events as f64 / secs.max(1e-9),
                per_round,
                statement: summary(timed.iter()),
            };
            if i == 0 {
                out.old = side;
            } else {
                out.new = side;
            }
        }
        old.close().await;
        new.close().await;
        out.ratio = out.new.events_per_s / out.old.events_per_s.max(1e-9);
        out.ratio_per_round = crate::stats::per_round(&out.new.per_round, &out.old.per_round);
        println!(
            "  => ingest partitioned {:.0} / unpartitioned {:.0} events/s = {:.3}x",
            out.new.events_per_s, out.old.events_per_s, out.ratio
        );
        Ok::<_, anyhow::Error>(())
    }
    .await;
    for db in &dbs {
        ctx.pg.drop_db(db).await;
    }
    r?;
    Ok(out)
}
