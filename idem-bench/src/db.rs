//! The database: a fresh one per part of the run, its schema, what the server is set to,
//! and a copy of the statements idem sends.

use idem_testkit::TestDb;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Executor};

/// idem's statements for one request, as `idem-runtime/src/store/postgres/mod.rs`
/// sends them with the default `claim_wait` of 1 s.
///
/// A copy, because the runtime keeps its SQL private (house rule 8: the runtime owns its
/// SQL in one place). If the runtime's statements change, change these with them, or the
/// floor measures yesterday's protocol.
pub(crate) mod protocol {
    /// `begin_statement(1000)`: BEGIN, the saved lock timeout, the claim's lock timeout.
    pub(crate) const BEGIN: &str = "BEGIN; \
         SELECT set_config('idem.outer_lock_timeout', current_setting('lock_timeout'), true); \
         SET LOCAL lock_timeout = 1000";

    /// `CLAIM`.
    pub(crate) const CLAIM: &str = "\
WITH ins AS (
    INSERT INTO idem_keys (scope, idem_key, request_hash, method, path, expires_at)
    VALUES ($1, $2, $3, $4, $5, now() + $6)
    ON CONFLICT (scope, idem_key) DO NOTHING
    RETURNING set_config('lock_timeout', current_setting('idem.outer_lock_timeout'), true)
)
SELECT true AS claimed, false AS expired, NULL::bytea AS request_hash, NULL::text AS method,
       NULL::text AS path, NULL::text AS state, NULL::smallint AS response_status,
       NULL::bytea AS response_headers, NULL::bytea AS response_body
  FROM ins
UNION ALL
SELECT false, k.expires_at <= now(), k.request_hash, k.method, k.path, k.state,
       k.response_status, k.response_headers, k.response_body
  FROM idem_keys k
 WHERE k.scope = $1 AND k.idem_key = $2 AND NOT EXISTS (SELECT FROM ins)";

    /// `COMPLETE`.
    pub(crate) const COMPLETE: &str = "\
UPDATE idem_keys
   SET state = 'completed', response_status = $3, response_headers = $4,
       response_body = $5, locked_until = NULL
 WHERE scope = $1 AND idem_key = $2
RETURNING coalesce(current_setting('idem.outer_lock_timeout', true), '') <> ''";

    /// The row a claim returns, as the runtime decodes it.
    pub(crate) type KeyRow = (
        bool,
        bool,
        Option<Vec<u8>>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<i16>,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
    );
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
    crate::orders::MIGRATOR
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
