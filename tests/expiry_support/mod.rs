//! Shared by the expiry tests: a fresh database with idem's schema, and key rows written
//! straight into `idem_keys` with the expiry and lease each test needs.
#![allow(dead_code)]

use std::future::Future;

use idem_testkit::{TestDb, TestSqlite};
use sqlx::{Pool, Postgres, Sqlite};

/// A fresh database with idem's migrations applied.
pub(crate) struct Keys<DB: KeysBackend = Postgres> {
    /// Kept so the database outlives the test.
    pub(crate) db: DB::Db,
    /// For the test's own statements: never through a pooler.
    pub(crate) pool: Pool<DB>,
    /// The one the expiry under test gets: through the pooler when there is one
    /// (ha/pgbouncer.sh).
    pub(crate) served_pool: Pool<DB>,
}

/// A pool that bypasses the pooler, for the databases that can have one.
trait DirectPool<DB: sqlx::Database> {
    async fn direct(&self, pool: &Pool<DB>, max_connections: u32) -> Pool<DB>;
}

impl DirectPool<Postgres> for TestDb {
    async fn direct(&self, pool: &Pool<Postgres>, max_connections: u32) -> Pool<Postgres> {
        if self.is_pooled() {
            self.direct_pool(max_connections).await
        } else {
            pool.clone()
        }
    }
}

impl DirectPool<Sqlite> for TestSqlite {
    async fn direct(&self, pool: &Pool<Sqlite>, _max_connections: u32) -> Pool<Sqlite> {
        pool.clone()
    }
}

/// Whether a row's key is in progress, and how its lease stands.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lease {
    /// Completed, no lease (`locked_until` NULL).
    None,
    /// In progress (`started`) with `locked_until` this many seconds from now
    /// (negative: a lease that ran out).
    Until(i64),
}

impl Keys {
    /// On a fresh PostgreSQL database.
    pub(crate) async fn new(max_connections: u32) -> Self {
        Self::open(max_connections).await
    }
}

impl<DB: KeysBackend> Keys<DB> {
    /// On a fresh database of `DB`.
    pub(crate) async fn open(max_connections: u32) -> Self {
        let (db, served_pool) = DB::open(max_connections).await;
        // idem's migrations through the pooler too: their lock is transaction-level.
        idem::migrate(&served_pool)
            .await
            .expect("idem's migrations");
        let pool = DB::direct(&db, &served_pool, max_connections).await;
        Self {
            db,
            pool,
            served_pool,
        }
    }

    /// Inserts `n` keys `<prefix>-1` .. `<prefix>-n` in scope `scope-<i % 7>`, whose
    /// retention ends `expires_in` seconds from now (negative: in the past).
    pub(crate) async fn insert(&self, prefix: &str, n: i64, expires_in: i64, lease: Lease) {
        DB::insert(&self.pool, prefix, n, expires_in, lease).await;
    }

    /// Rows left whose key starts with `<prefix>-`.
    pub(crate) async fn left(&self, prefix: &str) -> i64 {
        DB::left(&self.pool, prefix).await
    }

    /// All rows of the key table.
    pub(crate) async fn total(&self) -> i64 {
        DB::left(&self.pool, "").await
    }

    /// Ends the leases of the keys starting with `<prefix>-` a second ago.
    pub(crate) async fn end_leases(&self, prefix: &str) {
        DB::end_leases(&self.pool, prefix).await;
    }
}

impl Keys<Postgres> {
    /// Refreshes the planner's statistics, as autovacuum would after a bulk load.
    pub(crate) async fn analyze(&self) {
        sqlx::query("ANALYZE idem_keys")
            .execute(&self.pool)
            .await
            .expect("ANALYZE");
    }
}

/// A database the expiry tests write key rows into.
pub(crate) trait KeysBackend: idem::Backend {
    /// The test database, deleted when dropped.
    type Db;

    fn open(max_connections: u32) -> impl Future<Output = (Self::Db, Pool<Self>)>;

    /// `pool`, or one to the same database that bypasses the pooler `pool` goes through.
    fn direct(
        db: &Self::Db,
        pool: &Pool<Self>,
        max_connections: u32,
    ) -> impl Future<Output = Pool<Self>>;

    fn insert(
        pool: &Pool<Self>,
        prefix: &str,
        n: i64,
        expires_in: i64,
        lease: Lease,
    ) -> impl Future<Output = ()>;

    /// Rows whose key starts with `<prefix>-` (all rows for an empty prefix).
    fn left(pool: &Pool<Self>, prefix: &str) -> impl Future<Output = i64>;

    fn end_leases(pool: &Pool<Self>, prefix: &str) -> impl Future<Output = ()>;
}

/// Implements [`KeysBackend`] with the statements that differ passed in: the bulk insert
/// (binds: prefix, state, expires in s, lease in s, n) and the end of leases (binds:
/// prefix).
macro_rules! keys_backend {
    ($db:ty, $test_db:ty, $open:expr, $insert:literal, $end_leases:literal) => {
        impl KeysBackend for $db {
            type Db = $test_db;

            async fn open(max_connections: u32) -> ($test_db, Pool<Self>) {
                let db = $open;
                let pool = db.pool(max_connections).await;
                (db, pool)
            }

            async fn direct(db: &$test_db, pool: &Pool<Self>, max_connections: u32) -> Pool<Self> {
                DirectPool::direct(db, pool, max_connections).await
            }

            async fn insert(
                pool: &Pool<Self>,
                prefix: &str,
                n: i64,
                expires_in: i64,
                lease: Lease,
            ) {
                let (state, locked_in) = match lease {
                    Lease::None => ("completed", None),
                    Lease::Until(secs) => ("started", Some(secs)),
                };
                sqlx::query($insert)
                    .bind(prefix)
                    .bind(state)
                    .bind(expires_in as f64)
                    .bind(locked_in.map(|s| s as f64))
                    .bind(n)
                    .execute(pool)
                    .await
                    .unwrap_or_else(|e| panic!("insert {n} keys {prefix}-*: {e}"));
            }

            async fn left(pool: &Pool<Self>, prefix: &str) -> i64 {
                let pattern = if prefix.is_empty() {
                    "%".to_owned()
                } else {
                    format!("{prefix}-%")
                };
                sqlx::query_scalar("SELECT count(*) FROM idem_keys WHERE idem_key LIKE $1")
                    .bind(pattern)
                    .fetch_one(pool)
                    .await
                    .expect("count keys")
            }

            async fn end_leases(pool: &Pool<Self>, prefix: &str) {
                sqlx::query($end_leases)
                    .bind(prefix)
                    .execute(pool)
                    .await
                    .expect("end the leases");
            }
        }
    };
}

keys_backend!(
    Postgres,
    TestDb,
    TestDb::new().await,
    "INSERT INTO idem_keys (scope, idem_key, request_hash, method, path, state,
                            locked_until, response_status, response_headers,
                            response_body, created_at, expires_at)
     SELECT 'scope-' || (g % 7), $1 || '-' || g, sha256(g::text::bytea), 'POST',
            '/orders', $2, now() + make_interval(secs => $4),
            CASE WHEN $2 = 'completed' THEN 201 END,
            CASE WHEN $2 = 'completed' THEN '\\x'::bytea END,
            CASE WHEN $2 = 'completed' THEN '{}'::bytea END,
            now() + make_interval(secs => $3) - interval '1 day',
            now() + make_interval(secs => $3)
       FROM generate_series(1, $5) g",
    "UPDATE idem_keys SET locked_until = now() - interval '1 second' \
     WHERE idem_key LIKE $1 || '-%'"
);

// Times in microseconds since the Unix epoch, as idem's SQLite schema keeps them.
keys_backend!(
    Sqlite,
    TestSqlite,
    TestSqlite::new(),
    "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < $5)
     INSERT INTO idem_keys (scope, idem_key, request_hash, method, path, state,
                            locked_until, response_status, response_headers,
                            response_body, created_at, expires_at)
     SELECT 'scope-' || (g % 7), $1 || '-' || g, randomblob(32), 'POST',
            '/orders', $2,
            CAST(unixepoch('subsec') * 1000000 AS INTEGER) + CAST($4 * 1000000 AS INTEGER),
            CASE WHEN $2 = 'completed' THEN 201 END,
            CASE WHEN $2 = 'completed' THEN x'' END,
            CASE WHEN $2 = 'completed' THEN CAST('{}' AS BLOB) END,
            CAST(unixepoch('subsec') * 1000000 AS INTEGER) + CAST($3 * 1000000 AS INTEGER)
              - 86400000000,
            CAST(unixepoch('subsec') * 1000000 AS INTEGER) + CAST($3 * 1000000 AS INTEGER)
       FROM s",
    "UPDATE idem_keys
        SET locked_until = CAST(unixepoch('subsec') * 1000000 AS INTEGER) - 1000000
      WHERE idem_key LIKE $1 || '-%'"
);
