//! The database: a fresh one per part of the run, its schema, what the server is set to,
//! and a copy of the statements idem sends.

use idem_testkit::TestDb;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Executor};

/// idem's statements for one request, the very ones the runtime sends (it exports them
/// for this floor only), and the row its claim returns.
pub(crate) mod protocol {
    pub(crate) use idem::__private::postgres_sql::{CLAIM, COMPLETE, ExistingRecord};

    /// The runtime's default `claim_wait` in ms, bound as the claim's $7.
    pub(crate) const CLAIM_WAIT_MS: i64 = 1000;

    /// The row a claim returns, as the runtime decodes it: the generation, the existing
    /// row's record (`None` when the claim inserted the key) and the body.
    pub(crate) type KeyRow = (i64, Option<ExistingRecord<1>>, Option<Vec<u8>>);
}

/// A pool on `db` whose connections are all open before anything is timed.
pub(crate) async fn pool(db: &TestDb, size: u32) -> Result<PgPool, String> {
    PgPoolOptions::new()
        .max_connections(size)
        .min_connections(size)
        .connect(db.url())
        .await
        .map_err(|e| format!("cannot connect to the benchmark database: {e}"))
}

/// idem's schema, the example's `orders` and the hand-written baseline's `hand_keys`.
pub(crate) async fn create_schema(pool: &PgPool) -> Result<(), String> {
    idem::migrate(pool)
        .await
        .map_err(|e| format!("idem's migrations failed: {e}"))?;
    <sqlx::Postgres as crate::orders::OrderStore>::migrator()
        .run(pool)
        .await
        .map_err(|e| format!("the example's migrations failed: {e}"))?;
    pool.execute(AssertSqlSafe(crate::hand::SCHEMA))
        .await
        .map_err(|e| format!("creating hand_keys failed: {e}"))?;
    Ok(())
}

/// What the report says about the database server.
#[derive(Debug, Clone)]
pub(crate) struct ServerInfo {
    pub(crate) version: String,
    pub(crate) fsync: String,
    pub(crate) synchronous_commit: String,
    pub(crate) full_page_writes: String,
    pub(crate) shared_buffers: String,
    /// A private throwaway cluster (no DATABASE_URL).
    pub(crate) private: bool,
}

pub(crate) async fn server_info(pool: &PgPool) -> Result<ServerInfo, String> {
    let setting = async |name: &str| -> Result<String, String> {
        sqlx::query_scalar("SELECT current_setting($1)")
            .bind(name)
            .fetch_one(pool)
            .await
            .map_err(|e| format!("reading {name}: {e}"))
    };
    Ok(ServerInfo {
        version: setting("server_version").await?,
        fsync: setting("fsync").await?,
        synchronous_commit: setting("synchronous_commit").await?,
        full_page_writes: setting("full_page_writes").await?,
        shared_buffers: setting("shared_buffers").await?,
        private: std::env::var("DATABASE_URL").map_or(true, |url| url.trim().is_empty()),
    })
}

impl ServerInfo {
    pub(crate) fn durable(&self) -> bool {
        self.fsync == "on" && self.synchronous_commit != "off"
    }

    /// One line for the report.
    pub(crate) fn summary(&self) -> String {
        format!(
            "PostgreSQL {} ({}), fsync={}, synchronous_commit={}, full_page_writes={}, \
             shared_buffers={}",
            self.version,
            if self.private {
                "private throwaway cluster started by idem-testkit"
            } else {
                "the server DATABASE_URL names, in a fresh database"
            },
            self.fsync,
            self.synchronous_commit,
            self.full_page_writes,
            self.shared_buffers
        )
    }
}
