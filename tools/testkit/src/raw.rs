//! A raw connection to the gateway's database, for what a test writes or breaks behind the
//! gateway's back.

use sqlx::Connection as _;

use super::{Backend, TestApp};

/// A raw connection to the gateway's database, as a second process would have.
pub enum RawConn {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl RawConn {
    pub async fn open(app: &TestApp) -> Self {
        match app.backend {
            Backend::Sqlite => Self::Sqlite(
                sqlx::SqliteConnection::connect(&app.database_url)
                    .await
                    .unwrap(),
            ),
            Backend::Postgres => Self::Postgres(
                sqlx::PgConnection::connect(&app.database_url)
                    .await
                    .unwrap(),
            ),
        }
    }

    pub async fn exec(&mut self, sql: &str) {
        match self {
            Self::Sqlite(c) => sqlx::raw_sql(sql).execute(c).await.map(drop),
            Self::Postgres(c) => sqlx::raw_sql(sql).execute(c).await.map(drop),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The first column of the first row of `sql`, as an integer.
    pub async fn query_i64(&mut self, sql: &str) -> i64 {
        match self {
            Self::Sqlite(c) => sqlx::query_scalar(sql).fetch_one(c).await,
            Self::Postgres(c) => sqlx::query_scalar(sql).fetch_one(c).await,
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}
