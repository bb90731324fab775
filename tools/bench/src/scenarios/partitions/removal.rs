//! Retention of a day each layout's way (step 2), and the migration of the unpartitioned
//! layout (step 3).

use super::load::{insert_loop, summary};
use super::*;

/// Seeds `DAYS` days of `per_day` events each, spread evenly over their day, each with a
/// succeeded job and a succeeded attempt 1.5 s later (its own time), ids UUIDv7-shaped; on
/// the partitioned layout each event's dedupe key too. One transaction a day.
pub(super) async fn seed(
    pool: &PgPool,
    layout: Layout,
    per_day: u64,
    body: usize,
) -> anyhow::Result<f64> {
    let clock = Instant::now();
    let uuid = |ms: &str, variant: char| crate::pg::v7_sql(ms, "g", variant);
    let rows = "FROM (SELECT g, $1::bigint + (g - $2::bigint) * 86400000 / $3::bigint AS ms \
                FROM generate_series($2::bigint, $2::bigint + $3::bigint - 1) AS g) s";
    let events = format!(
        "INSERT INTO events (id, tenant, source, provider_event_id, event_type, received_at, \
           content_type, headers, body, verified_scheme, verified_secret_index) \
         SELECT {id}, 'default', 'stripe', 'evt_seed_' || g, 'invoice.paid', \
           to_timestamp(ms / 1000.0), 'application/json', \
           '[[\"content-type\",\"application/json\"]]'::jsonb, \
           convert_to(rpad('{{\"id\":\"evt_seed_' || g || '\",\"type\":\"invoice.paid\",\"pad\":\"', {pad}, 'x') || '\"}}', 'UTF8'), \
           'stripe-v1', 0 {rows}",
        id = uuid("ms", '8'),
        pad = body.saturating_sub(2),
    );
    let jobs = format!(
        "INSERT INTO jobs (id, event_id, destination, status, attempts, next_attempt_at, \
           created_at, updated_at) \
         SELECT {jid}, {eid}, 'sink', 'succeeded', 1, to_timestamp(ms / 1000.0), \
           to_timestamp(ms / 1000.0), to_timestamp((ms + 1500) / 1000.0) {rows}",
        jid = uuid("ms", '9'),
        eid = uuid("ms", '8'),
    );
    let attempts = format!(
        "INSERT INTO delivery_attempts (id, job_id, attempt, worker_id, started_at, \
           duration_ms, status_code, outcome) \
         SELECT {aid}, {jid}, 1, 'bench', to_timestamp((ms + 1500) / 1000.0), 12, 200, \
           'succeeded' {rows}",
        aid = uuid("(ms + 1500)", 'a'),
        jid = uuid("ms", '9'),
    );
    let keys = format!(
        "INSERT INTO event_keys (source, provider_event_id, event_id, received_at) \
         SELECT 'stripe', 'evt_seed_' || g, {eid}, to_timestamp(ms / 1000.0) {rows}",
        eid = uuid("ms", '8'),
    );
    let mut statements = vec![&events, &jobs, &attempts];
    if layout == Layout::Partitioned {
        statements.insert(0, &keys);
    }
    let first = first_day().timestamp_millis();
    for d in 0..DAYS {
        let mut tx = pool.begin().await?;
        for sql in &statements {
            sqlx::query(sql)
                .bind(first + d as i64 * 86_400_000)
                .bind((d * per_day) as i64 + 1)
                .bind(per_day as i64)
                .execute(&mut *tx)
                .await
                .context("seeding")?;
        }
        tx.commit().await?;
        println!(
            "    {}: seeded day {} of {DAYS} ({:.0} s)",
            layout.name(),
            d + 1,
            clock.elapsed().as_secs_f64()
        );
    }
    let tables = if layout == Layout::Partitioned {
        "events, jobs, delivery_attempts, event_keys"
    } else {
        "events, jobs, delivery_attempts"
    };
    sqlx::raw_sql(&format!("VACUUM ANALYZE {tables}"))
        .execute(pool)
        .await?;
    sqlx::raw_sql("CHECKPOINT").execute(pool).await?;
    Ok(clock.elapsed().as_secs_f64())
}

pub(super) async fn wal_lsn(pool: &PgPool) -> anyhow::Result<String> {
    Ok(
        sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
            .fetch_one(pool)
            .await?,
    )
}

pub(super) async fn wal_since(pool: &PgPool, lsn: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint",
    )
    .bind(lsn)
    .fetch_one(pool)
    .await?)
}

pub(super) async fn db_size_mb(pool: &PgPool) -> anyhow::Result<f64> {
    let bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(pool)
        .await?;
    Ok(bytes as f64 / 1_048_576.0)
}

/// Removes the day ending at `before` the layout's way. WAL is counted over the whole
/// server, so a removal beside the insert loop counts the loop's too (not recorded then).
pub(super) async fn remove_day(
    pool: &PgPool,
    store: &hookgate::store::PgStore,
    layout: Layout,
    before: DateTime<Utc>,
) -> anyhow::Result<Removal> {
    let mut r = Removal::default();
    let lsn = wal_lsn(pool).await?;
    let clock = Instant::now();
    match layout {
        Layout::Unpartitioned => {
            // Planned afresh each time: a generic plan cached after five executions
            // estimates the pending jobs from statistics taken before the insert loop
            // queued its (never delivered) jobs, and then scans all of them for every
            // event. A gateway's queue stays short, so that is the bench's artefact.
            let mut conn = pool.acquire().await?;
            sqlx::raw_sql("SET plan_cache_mode = force_custom_plan")
                .execute(&mut *conn)
                .await?;
            loop {
                let started = Instant::now();
                let n = sqlx::query(OLD_DELETE)
                    .bind(before)
                    .bind(RETENTION_BATCH)
                    .execute(&mut *conn)
                    .await?
                    .rows_affected();
                r.slowest_statement_ms = r
                    .slowest_statement_ms
                    .max(started.elapsed().as_secs_f64() * 1000.0);
                r.events_removed += n;
                r.statements += 1;
                if n < RETENTION_BATCH as u64 {
                    break;
                }
            }
            sqlx::raw_sql("RESET plan_cache_mode")
                .execute(&mut *conn)
                .await?;
        }
        Layout::Partitioned => {
            let sweep = store
                .drop_expired_partitions(before, RETENTION_BATCH)
                .await?;
            r.drop_seconds = clock.elapsed().as_secs_f64();
            r.drop_wal_bytes = wal_since(pool, &lsn).await?;
            r.events_removed = sweep.expired_events;
            r.partitions_dropped = sweep.dropped;
            r.partitions_held = sweep.held;
            let keys_lsn = wal_lsn(pool).await?;
            let keys_clock = Instant::now();
            let keys = store.forget_expired_keys(before, RETENTION_BATCH).await?;
            r.keys_seconds = keys_clock.elapsed().as_secs_f64();
            r.keys_wal_bytes = wal_since(pool, &keys_lsn).await?;
            r.statements = keys / RETENTION_BATCH as u64 + 1;
        }
    }
    r.seconds = clock.elapsed().as_secs_f64();
    r.wal_bytes = wal_since(pool, &lsn).await?;
    Ok(r)
}

pub(super) async fn retention(
    ctx: &Ctx,
    db: &str,
    layout: Layout,
    per_day: u64,
    out: &mut Partitions,
) -> anyhow::Result<RetentionSide> {
    let first = first_day();
    let pool = prepare(ctx, db, layout, first).await?;
    let mut side = RetentionSide {
        layout,
        stored_events: per_day * DAYS,
        ..Default::default()
    };
    side.seed_seconds = seed(&pool, layout, per_day, ctx.body_size.min(64)).await?;
    side.db_size_mb = db_size_mb(&pool).await?;
    println!(
        "    {}: {} events stored, {:.0} MB, seeded in {:.0} s",
        layout.name(),
        side.stored_events,
        side.db_size_mb,
        side.seed_seconds
    );
    let cfg = GwConfig::new(ctx.pg.url(db), "http://127.0.0.1:9/unused");
    let settings = hookgate::config::Settings::from_toml_str(&render_toml(&ctx.gw, &cfg))?;
    let config = hookgate::config::GatewayConfig::from_settings(&settings)?;
    let store = hookgate::store::Store::connect(&config.database)?;
    let hookgate::store::Store::Postgres(pg) = &store else {
        anyhow::bail!("not a PostgreSQL store");
    };

    let day = chrono::Duration::days(1);
    side.alone = remove_day(&pool, pg, layout, first + day).await?;
    println!(
        "    {}: the oldest day ({} events) removed in {:.2} s, {:.1} MB of WAL",
        layout.name(),
        side.alone.events_removed,
        side.alone.seconds,
        side.alone.wal_bytes as f64 / 1_048_576.0
    );
    sqlx::raw_sql("CHECKPOINT").execute(&pool).await?;

    // The next day, beside the fixed-rate insert loop: the loop alone first, then the removal.
    let (tx, rx) = tokio::sync::watch::channel(false);
    let body = ctx.body_size;
    let loop_pool = pool.clone();
    let inserting = tokio::spawn(async move {
        insert_loop(&loop_pool, layout, body, Some(LOOP_EVERY), Arc::new(rx)).await
    });
    let t0 = Instant::now();
    tokio::time::sleep(LOOP_BASELINE).await;
    let t1 = Instant::now();
    let removed = remove_day(&pool, pg, layout, first + day * 2).await;
    let t2 = Instant::now().max(t1 + MIN_WINDOW);
    tokio::time::sleep_until(t2.into()).await;
    let _ = tx.send(true);
    let timed = inserting.await??;
    side.under_load = removed?;
    side.loop_baseline = summary(timed.iter().filter(|(a, b)| *a >= t0 && *b <= t1));
    side.loop_during = summary(timed.iter().filter(|(a, b)| *a < t2 && *b > t1));
    println!(
        "    {}: the next day removed under the insert loop in {:.2} s; loop p99 {:.1} ms \
         (max {:.1}) during, {:.1} ms (max {:.1}) before",
        layout.name(),
        side.under_load.seconds,
        side.loop_during.p99_ms,
        side.loop_during.max_ms,
        side.loop_baseline.p99_ms,
        side.loop_baseline.max_ms
    );
    store.close().await;

    if layout == Layout::Unpartitioned {
        out.migration = Some(migrate(ctx, &pool, &cfg).await?);
    }
    pool.close().await;
    Ok(side)
}

/// The old-layout database as it is (its remaining days, vacuumed as autovacuum would have),
/// migrated by `hookgate migrate`.
pub(super) async fn migrate(ctx: &Ctx, pool: &PgPool, cfg: &GwConfig) -> anyhow::Result<Migration> {
    sqlx::raw_sql("VACUUM ANALYZE events, jobs, delivery_attempts")
        .execute(pool)
        .await?;
    sqlx::raw_sql("CHECKPOINT").execute(pool).await?;
    let count = |t: &str| format!("SELECT count(*) FROM {t}");
    let mut m = Migration::default();
    for (t, n) in [
        ("events", &mut m.events),
        ("jobs", &mut m.jobs),
        ("delivery_attempts", &mut m.attempts),
    ] {
        let c: i64 = sqlx::query_scalar(&count(t)).fetch_one(pool).await?;
        *n = c as u64;
    }
    m.db_size_mb = db_size_mb(pool).await?;
    let lsn = wal_lsn(pool).await?;
    let clock = Instant::now();
    gateway::migrate(&ctx.gw, cfg)?;
    m.seconds = clock.elapsed().as_secs_f64();
    m.wal_bytes = wal_since(pool, &lsn).await?;
    m.seconds_per_million_events = m.seconds / (m.events as f64 / 1e6).max(1e-9);
    let migrated: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM _sqlx_migrations WHERE version = $1 AND success)",
    )
    .bind(PARTITION_MIGRATION)
    .fetch_one(pool)
    .await?;
    anyhow::ensure!(
        migrated,
        "hookgate migrate did not apply {PARTITION_MIGRATION}"
    );
    println!(
        "    migration of {} events ({:.0} MB): {:.1} s, {:.1} s per million events",
        m.events, m.db_size_mb, m.seconds, m.seconds_per_million_events
    );
    Ok(m)
}
