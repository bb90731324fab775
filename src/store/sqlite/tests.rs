//! The connection settings each pooled SQLite connection really runs with.

use std::time::Duration;

use super::SqliteStore;
use crate::config::{DatabaseConfig, SqliteSynchronous};

async fn pragma(store: &SqliteStore, name: &str) -> i64 {
    sqlx::query_scalar(&format!("PRAGMA {name}"))
        .fetch_one(&store.pool)
        .await
        .unwrap()
}

fn store(dir: &tempfile::TempDir, level: SqliteSynchronous) -> SqliteStore {
    SqliteStore::connect(&DatabaseConfig {
        url: format!("sqlite://{}", dir.path().join("s.db").display()),
        max_connections: 1,
        acquire_timeout: Duration::from_secs(5),
        busy_timeout: Duration::from_secs(5),
        sqlite_synchronous: level,
    })
    .unwrap()
}

#[tokio::test]
async fn the_configured_synchronous_level_and_no_auto_checkpoint_apply() {
    let dir = tempfile::tempdir().unwrap();
    // SQLite's codes: 1 = NORMAL, 2 = FULL.
    assert_eq!(
        pragma(&store(&dir, SqliteSynchronous::Full), "synchronous").await,
        2
    );
    let normal = store(&dir, SqliteSynchronous::Normal);
    assert_eq!(pragma(&normal, "synchronous").await, 1);
    assert_eq!(pragma(&normal, "wal_autocheckpoint").await, 0);
}
