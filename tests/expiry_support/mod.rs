//! Shared by the expiry tests: a fresh database with idem's schema, and key rows written
//! straight into `idem_keys` with the expiry and lease each test needs.
#![allow(dead_code)]

use idem_testkit::TestDb;
use sqlx::PgPool;

/// A fresh database with idem's migrations applied.
pub(crate) struct Keys {
    /// Kept so the database outlives the test.
    pub(crate) db: TestDb,
    pub(crate) pool: PgPool,
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
    pub(crate) async fn new(max_connections: u32) -> Self {
        let db = TestDb::new().await;
        let pool = db.pool(max_connections).await;
        idem::migrate(&pool).await.expect("idem's migrations");
        Self { db, pool }
    }

    /// Inserts `n` keys `<prefix>-1` .. `<prefix>-n` in scope `scope-<i % 7>`, whose
    /// retention ends `expires_in` seconds from now (negative: in the past).
    pub(crate) async fn insert(&self, prefix: &str, n: i64, expires_in: i64, lease: Lease) {
        let (state, locked_in) = match lease {
            Lease::None => ("completed", None),
            Lease::Until(secs) => ("started", Some(secs)),
        };
        sqlx::query(
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
        )
        .bind(prefix)
        .bind(state)
        .bind(expires_in as f64)
        .bind(locked_in.map(|s| s as f64))
        .bind(n)
        .execute(&self.pool)
        .await
        .unwrap_or_else(|e| panic!("insert {n} keys {prefix}-*: {e}"));
    }

    /// Rows left whose key starts with `<prefix>-`.
    pub(crate) async fn left(&self, prefix: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM idem_keys WHERE idem_key LIKE $1 || '-%'")
            .bind(prefix)
            .fetch_one(&self.pool)
            .await
            .expect("count keys")
    }

    /// All rows of the key table.
    pub(crate) async fn total(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM idem_keys")
            .fetch_one(&self.pool)
            .await
            .expect("count keys")
    }

    /// Refreshes the planner's statistics, as autovacuum would after a bulk load.
    pub(crate) async fn analyze(&self) {
        sqlx::query("ANALYZE idem_keys")
            .execute(&self.pool)
            .await
            .expect("ANALYZE");
    }
}
