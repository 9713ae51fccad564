//! [`TestDb`]: a fresh database on a real PostgreSQL server (the one `DATABASE_URL`
//! names, or the private cluster), its URLs and pools, and its removal on drop.

use std::fmt;
use std::sync::mpsc;
use std::time::Duration;

use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, Executor};

use crate::names::unique_db_name;
use crate::private::Cluster;
use crate::url::{redact, with_database, with_param};

/// How long dropping a database may take before [`Drop`] gives up on it.
const DROP_TIMEOUT: Duration = Duration::from_secs(15);
/// How long connecting to the server to create a database may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A fresh empty database on a real PostgreSQL server; dropped (best effort) when the value is dropped.
///
/// The server is the one `DATABASE_URL` names, or else a private cluster that this test
/// process starts once and that disappears with it.
pub struct TestDb {
    /// Name of the database this value owns.
    name: String,
    /// URL of the database this value owns.
    url: String,
    /// URL of the maintenance database of the same server, used for `DROP DATABASE`.
    admin_url: String,
    /// URL of the database this value owns through `IDEM_TESTKIT_POOLER_URL`, when set.
    pooled_url: Option<String>,
}

impl fmt::Debug for TestDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestDb")
            .field("name", &self.name)
            .field("url", &redact(&self.url))
            .field("pooled_url", &self.pooled_url.as_deref().map(redact))
            .finish()
    }
}

impl TestDb {
    /// Creates a fresh database. Panics with a clear, actionable message when no PostgreSQL can be had.
    ///
    /// With `DATABASE_URL` set, the database is created on that server; otherwise on the
    /// private cluster of this test process, which is started on first use.
    pub async fn new() -> TestDb {
        let (admin_url, private) = match std::env::var("DATABASE_URL") {
            Ok(url) if !url.trim().is_empty() => (url.trim().to_owned(), false),
            _ => (Cluster::get().admin_url.clone(), true),
        };

        let mut conn = connect_admin(&admin_url).await;
        // On the private cluster (fsync=off), copying the template's files is faster than
        // WAL-logging them (PostgreSQL 15's default; about 1.3x here); on a shared server
        // with fsync on, the checkpoints of FILE_COPY make it much slower: default there.
        let mut strategy = "";
        if private {
            let version: Result<String, _> =
                sqlx::query_scalar("SELECT current_setting('server_version_num')")
                    .fetch_one(&mut conn)
                    .await;
            if version.is_ok_and(|v| v.parse::<u32>().is_ok_and(|v| v >= 150_000)) {
                strategy = " STRATEGY FILE_COPY";
            }
        }
        let name = loop {
            let name = unique_db_name();
            // The name is made of [a-z0-9_] only, so quoting it is enough.
            let sql = format!("CREATE DATABASE \"{name}\"{strategy}");
            match conn.execute(AssertSqlSafe(sql)).await {
                Ok(_) => break name,
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => {
                    // duplicate_database: a leftover with the same name; take the next one.
                    continue;
                }
                Err(e) => panic!(
                    "idem-testkit: CREATE DATABASE {name} failed on {}: {e}",
                    redact(&admin_url)
                ),
            }
        };
        let _ = conn.close().await;

        let url = with_database(&admin_url, &name);
        let pooled_url = match std::env::var("IDEM_TESTKIT_POOLER_URL") {
            // A transaction pooler hands each transaction a server connection of its own:
            // statements sqlx prepared and cached on one are not there on the next.
            Ok(pooler) if !pooler.trim().is_empty() => Some(with_param(
                &with_database(pooler.trim(), &name),
                "statement-cache-capacity=0",
            )),
            _ => None,
        };
        TestDb {
            name,
            url,
            admin_url,
            pooled_url,
        }
    }

    /// Connection URL of the fresh database (postgres://...), usable by child processes too.
    ///
    /// Through the pooler when `IDEM_TESTKIT_POOLER_URL` is set.
    pub fn url(&self) -> &str {
        self.pooled_url.as_deref().unwrap_or(&self.url)
    }

    /// Connection URL of the fresh database on the server itself, never through a pooler.
    pub fn direct_url(&self) -> &str {
        &self.url
    }

    /// Whether [`url`](Self::url) and [`pool`](Self::pool) go through a pooler
    /// (`IDEM_TESTKIT_POOLER_URL`).
    pub fn is_pooled(&self) -> bool {
        self.pooled_url.is_some()
    }

    /// A new pool (sqlx::PgPool) to this database with `max_connections` connections.
    ///
    /// Through the pooler when `IDEM_TESTKIT_POOLER_URL` is set. The pool is bound to the
    /// tokio runtime it is used on; make one per runtime. Panics when the database cannot
    /// be reached.
    pub async fn pool(&self, max_connections: u32) -> PgPool {
        connect_pool(self.url(), max_connections).await
    }

    /// Like [`pool`](Self::pool), but to the server itself, never through a pooler.
    pub async fn direct_pool(&self, max_connections: u32) -> PgPool {
        connect_pool(&self.url, max_connections).await
    }
}

async fn connect_pool(url: &str, max_connections: u32) -> PgPool {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect(url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "idem-testkit: cannot connect to test database {}: {e}",
                redact(url)
            )
        })
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Drop cannot be async and may run inside (or outside) any runtime: do the work on a
        // thread with its own runtime, and never wait for it longer than DROP_TIMEOUT.
        let admin_url = self.admin_url.clone();
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        let (tx, rx) = mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("idem-testkit-drop".into())
            .spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(async {
                        let work = async {
                            let mut conn = PgConnection::connect(&admin_url).await?;
                            conn.execute(AssertSqlSafe(sql)).await?;
                            conn.close().await
                        };
                        let _ = tokio::time::timeout(DROP_TIMEOUT, work).await;
                    });
                }
                let _ = tx.send(());
            });
        if spawned.is_ok() {
            let _ = rx.recv_timeout(DROP_TIMEOUT + Duration::from_secs(5));
        }
    }
}

/// Connects to the maintenance database, panicking with the (redacted) URL on failure.
async fn connect_admin(admin_url: &str) -> PgConnection {
    let attempt = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect(admin_url)).await;
    match attempt {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => panic!(
            "idem-testkit: cannot connect to PostgreSQL at {} (from DATABASE_URL, or the private \
             test cluster when it is unset): {e}. Start that server, fix DATABASE_URL, or unset it \
             to let the tests start a private cluster.",
            redact(admin_url)
        ),
        Err(_) => panic!(
            "idem-testkit: connecting to PostgreSQL at {} timed out after {:?}",
            redact(admin_url),
            CONNECT_TIMEOUT
        ),
    }
}
