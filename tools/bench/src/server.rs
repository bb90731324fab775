//! The PostgreSQL server the suite measures against. By default a throwaway cluster of its
//! own, configured the way docs/OPERATIONS.md recommends for production (enough WAL room that
//! checkpoints are minutes apart, a quarter of RAM for shared buffers) and with its WAL
//! segments already allocated, as on a server that has been running for a while. With `--pg`,
//! an existing server as it is. Either way pgbench and the gateway share the server and its
//! settings, so their ratio compares like with like.

use std::path::Path;
use std::time::Instant;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use sqlx::{Connection as _, PgConnection};

use crate::cluster::{self, Cluster};
use crate::pg::PgServer;
use crate::writeback::{HostWriteback, WritebackSetup};

/// Settings reported with the results, whoever chose them.
const REPORTED: &[&str] = &[
    "shared_buffers",
    "max_wal_size",
    "min_wal_size",
    "checkpoint_timeout",
    "autovacuum_naptime",
    "synchronous_commit",
    "fsync",
    "full_page_writes",
];

/// How the server was set up, for the results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerSetup {
    /// True when the suite started the cluster itself.
    pub owned: bool,
    /// (name, value) as the server reports them.
    pub settings: Vec<(String, String)>,
    /// Seconds spent allocating WAL segments before the first scenario.
    pub wal_prealloc_s: f64,
    /// The host's dirty-page writeback during the run.
    pub writeback: WritebackSetup,
}

/// The server for this run; an owned cluster stops when this is dropped.
pub struct Server {
    pub pg: PgServer,
    pub setup: ServerSetup,
    cluster: Option<Cluster>,
    writeback: HostWriteback,
}

impl Server {
    /// `--pg URL`: that server, untouched. Otherwise a cluster in `dir` (which must not
    /// exist), with the host's writeback set as docs/OPERATIONS.md recommends unless
    /// `keep_writeback`.
    pub async fn start(
        existing: Option<&str>,
        dir: &Path,
        keep_writeback: bool,
    ) -> anyhow::Result<Server> {
        let Some(base) = existing else {
            return Self::own(dir, HostWriteback::setup(!keep_writeback)).await;
        };
        let writeback = HostWriteback::setup(false);
        let pg = PgServer {
            base: base.to_owned(),
        };
        let setup = ServerSetup {
            owned: false,
            settings: report_settings(&pg).await?,
            wal_prealloc_s: 0.0,
            writeback: writeback.setup.clone(),
        };
        Ok(Server {
            pg,
            setup,
            cluster: None,
            writeback,
        })
    }

    async fn own(dir: &Path, writeback: HostWriteback) -> anyhow::Result<Server> {
        let bin = cluster::find_pg_bin()
            .context("no PostgreSQL binaries (initdb, pg_ctl): install them, or pass --pg URL")?;
        println!(
            "  starting the bench's own PostgreSQL cluster in {}",
            dir.display()
        );
        let settings = production_settings();
        let cluster = Cluster::start_with(&bin, dir, cluster::free_port()?, &settings).await?;
        let base = cluster.url("");
        let pg = PgServer {
            base: base.trim_end_matches('/').to_owned(),
        };
        let clock = Instant::now();
        preallocate_wal(&pg.url("postgres")).await?;
        let setup = ServerSetup {
            owned: true,
            settings: report_settings(&pg).await?,
            wal_prealloc_s: clock.elapsed().as_secs_f64(),
            writeback: writeback.setup.clone(),
        };
        println!(
            "  cluster ready at {base} ({}; WAL allocated in {:.0} s)",
            describe(&setup.settings),
            setup.wal_prealloc_s
        );
        Ok(Server {
            pg,
            setup,
            cluster: Some(cluster),
            writeback,
        })
    }

    /// Stops an owned cluster and restores the host's writeback now (also done on drop).
    pub fn stop(&self) {
        if let Some(c) = &self.cluster {
            c.stop();
        }
        self.writeback.restore();
    }
}

/// docs/OPERATIONS.md's advice for a write-heavy gateway database, scaled to this machine.
fn production_settings() -> Vec<(&'static str, String)> {
    let ram_mb = crate::report::mem_total_kb().map_or(4096, |kb| kb / 1024);
    let shared_mb = (ram_mb / 4).clamp(128, 8192);
    vec![
        ("max_connections", "300".into()),
        ("shared_buffers", format!("'{shared_mb}MB'")),
        ("max_wal_size", "'16GB'".into()),
        ("min_wal_size", format!("'{}MB'", WAL_SEGMENTS * 16)),
        ("checkpoint_timeout", "'15min'".into()),
        ("checkpoint_completion_target", "0.9".into()),
        ("autovacuum_naptime", "'10s'".into()),
    ]
}

/// WAL segments (16 MB each) allocated up front: several GB of ingest, more than any one
/// scenario writes between the checkpoints that recycle them.
const WAL_SEGMENTS: u32 = 256;

/// A fresh cluster has one WAL segment and creates (zero-fills and syncs) a new 16 MB file
/// each time it fills one, a stall of tens of milliseconds in whichever commit needs it. A
/// server that has been running recycles old segments instead. Switching segments
/// `WAL_SEGMENTS` times and then checkpointing leaves that many recycled, ready ahead.
async fn preallocate_wal(url: &str) -> anyhow::Result<()> {
    let mut c = PgConnection::connect(url).await?;
    // Not a temporary table: those write no WAL, and a switch with nothing written is a no-op.
    sqlx::raw_sql("CREATE TABLE bench_wal_warm (x int)")
        .execute(&mut c)
        .await?;
    for _ in 0..WAL_SEGMENTS {
        sqlx::raw_sql("INSERT INTO bench_wal_warm VALUES (1); SELECT pg_switch_wal();")
            .execute(&mut c)
            .await?;
    }
    sqlx::raw_sql("DROP TABLE bench_wal_warm; CHECKPOINT")
        .execute(&mut c)
        .await?;
    let _ = c.close().await;
    Ok(())
}

async fn report_settings(pg: &PgServer) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for name in REPORTED {
        out.push((name.to_string(), pg.setting(name).await?));
    }
    Ok(out)
}

/// `shared_buffers 5GB, max_wal_size 16GB, ...` for a report line.
pub fn describe(settings: &[(String, String)]) -> String {
    let parts: Vec<String> = settings.iter().map(|(k, v)| format!("{k} {v}")).collect();
    parts.join(", ")
}
