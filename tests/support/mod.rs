//! Shared by the integration tests: the example's application on a fresh database
//! (PostgreSQL, or a SQLite file) and on either web framework (the actix-web example's
//! `app::configure`, or the axum example's `axum_app::router`), requests to it, and what
//! the database holds afterwards.
//!
//! Every test module says `use crate::support;` (the test binaries `tests/it/` and
//! `tests/process/` declare it once at their root; a test file that is a binary of its own
//! says `mod support;`) and uses the part it needs. Requests are
//! framework-neutral ([`TestRequest`]); [`service`] builds the application on the
//! framework the running test chose. Which tests run where is said where they are
//! instantiated:
//!
//! - `support::backend_tests!(name, ..)`: `async fn name<DB: TestBackend>()` on both
//!   frameworks and both databases (`with_actix::postgres::name`, .., `with_axum::sqlite::name`);
//! - `support::both_frameworks!(#[runtime] name, ..)`: `async fn name()` on both frameworks
//!   (`on_actix::name`, `on_axum::name`);
//! - `support::actix_only_tests!(name, ..)`: both databases, actix-web only, for tests that
//!   register actix-web routes of their own ([`service_with`], [`service_before`]) and have
//!   no axum twin ([`service_with_twin`], [`service_before_twin`]);
//! - `support::database_tests!(name, ..)`: both databases, for tests that build no web
//!   application.
//!
//! A test with a plain `#[actix_web::test]` or `#[tokio::test]` runs on actix-web.
#![allow(dead_code)]

#[path = "../../examples/orders/app.rs"]
pub(crate) mod app;
/// The axum binary's router (`examples/orders-axum`), on the same `domain` files.
#[path = "../../examples/orders-axum/app.rs"]
pub(crate) mod axum_app;
mod framework;
pub(crate) mod held;
mod reply;
mod request;

use std::future::Future;

// `axum_app` names the shared files as `super::domain`, as in its binary.
pub(crate) use app::domain;

use idem_testkit::{TestDb, TestSqlite};
use sqlx::{AssertSqlSafe, Pool, Postgres, Sqlite};

#[allow(unused_imports)] // Each test file uses the part of this module it needs.
pub(crate) use framework::{
    Framework, Server, TestApp, own_service, serve_with_twin, service, service_before,
    service_before_twin, service_with, service_with_twin,
};
pub(crate) use reply::Reply;
#[allow(unused_imports)]
pub(crate) use request::{
    TestRequest, get, order_json, post, post_order, post_raw_key, post_unkeyed,
};

/// Two callers.
pub(crate) const ALICE: i64 = 1001;
pub(crate) const BOB: i64 = 2002;

/// The `type` of idem's problem responses, before the slug.
pub(crate) const IDEM_PROBLEM: &str = "https://docs.rs/idem/latest/idem/problem/index.html#";

/// The `type` of the example's own problem responses, before the slug.
pub(crate) const APP_PROBLEM: &str =
    "https://github.com/idem-rs/idem/blob/main/examples/orders/README.md#";

/// Pool size for the tests: room for 20 concurrent requests plus the test's own queries.
pub(crate) const POOL_SIZE: u32 = 25;

/// Instantiates each generic test `name::<DB>()` once per framework and database, as
/// `with_actix::postgres::name`, `with_actix::sqlite::name`, `with_axum::postgres::name`
/// and `with_axum::sqlite::name`, so one test command runs all four. The framework is
/// what [`service`] builds in that test (`cargo test -- with_axum` runs the axum half).
#[allow(unused_macros)] // Each test file uses the part of this module it needs.
macro_rules! backend_tests {
    ($($name:ident),+ $(,)?) => {
        // Each test file may be a module of a larger test binary (`tests/it/`), so the
        // generated tests name the file's functions relative to themselves, never by
        // `crate::`: the imports make `super::name` of the modules below the file's `name`.
        mod with_actix {
            use super::{$($name),+};
            $crate::support::framework_tests!(Actix, $($name),+);
        }
        mod with_axum {
            use super::{$($name),+};
            $crate::support::framework_tests!(Axum, $($name),+);
        }
    };
}
#[allow(unused_imports)]
pub(crate) use backend_tests;

/// Like [`backend_tests!`] for tests that register actix-web routes of their own
/// (`service_with`, `service_before`) with no axum twin: `postgres::name` and
/// `sqlite::name`, on actix-web only, so that it is explicit which tests axum misses.
#[allow(unused_macros)]
macro_rules! actix_only_tests {
    ($($name:ident),+ $(,)?) => {
        $crate::support::framework_tests!(Actix, $($name),+);
    };
}
#[allow(unused_imports)]
pub(crate) use actix_only_tests;

/// For a test that is not generic over the database, `async fn name()`: once per
/// framework, as `on_actix::name` and `on_axum::name` (beside the `with_*` modules of
/// [`backend_tests!`] in the same file; `cargo test -- axum` runs the axum half of both).
/// Each name comes with the runtime attribute its tests carry, e.g.
/// `both_frameworks!(#[actix_web::test] a, #[tokio::test(flavor = "multi_thread")] b)`.
#[allow(unused_macros)]
macro_rules! both_frameworks {
    ($(#[$runtime:meta] $name:ident),+ $(,)?) => {
        mod on_actix {
            $(
                #[$runtime]
                async fn $name() {
                    $crate::support::Framework::Actix.select();
                    super::$name().await;
                }
            )+
        }
        mod on_axum {
            $(
                #[$runtime]
                async fn $name() {
                    $crate::support::Framework::Axum.select();
                    super::$name().await;
                }
            )+
        }
    };
}
#[allow(unused_imports)]
pub(crate) use both_frameworks;

/// For tests that build no web application (the store, maintenance, the outbox):
/// `postgres::name` and `sqlite::name`, with no framework to choose.
#[allow(unused_macros)]
macro_rules! database_tests {
    ($($name:ident),+ $(,)?) => {
        $crate::support::framework_tests!(Actix, $($name),+);
    };
}
#[allow(unused_imports)]
pub(crate) use database_tests;

/// The databases for one framework: `postgres::name` and `sqlite::name`, each selecting
/// `$framework` before it runs the test file's `name::<DB>()`.
#[allow(unused_macros)]
macro_rules! framework_tests {
    ($framework:ident, $($name:ident),+) => {
        mod postgres {
            $(
                #[actix_web::test]
                async fn $name() {
                    $crate::support::Framework::$framework.select();
                    super::$name::<sqlx::Postgres>().await;
                }
            )+
        }
        mod sqlite {
            $(
                #[actix_web::test]
                async fn $name() {
                    $crate::support::Framework::$framework.select();
                    super::$name::<sqlx::Sqlite>().await;
                }
            )+
        }
    };
}
#[allow(unused_imports)]
pub(crate) use framework_tests;

/// `postgres()` when `DB` is PostgreSQL, `sqlite()` when it is SQLite: for what a test
/// must name once per database, such as an axum handler made idempotent (which cannot be
/// generic).
pub(crate) fn by_database<DB: TestBackend, T>(
    postgres: impl FnOnce() -> T,
    sqlite: impl FnOnce() -> T,
) -> T {
    use std::any::TypeId;
    if TypeId::of::<DB>() == TypeId::of::<Postgres>() {
        postgres()
    } else if TypeId::of::<DB>() == TypeId::of::<Sqlite>() {
        sqlite()
    } else {
        panic!("the tests run on PostgreSQL and SQLite only")
    }
}

/// `(scope, key, state, response_status)` of a key row.
pub(crate) type KeyRow = (String, String, String, Option<i16>);

/// A database the tests run on: how to get a fresh one, and the few reads whose SQL
/// differs.
pub(crate) trait TestBackend: app::Store {
    /// The test database, dropped (and deleted) at the end of the test.
    type Db;

    /// The example's axum router on this database, with `idem`.
    fn axum_router(idem: &idem::Idem<Self>) -> axum::Router;

    /// A fresh, empty database and a pool of [`POOL_SIZE`] to it.
    fn open() -> impl Future<Output = (Self::Db, Pool<Self>)>;

    /// The database's URL, for a child process.
    fn url(db: &Self::Db) -> String;

    /// The pool the migrations and the tests' own reads use: `pool`, or a direct one when
    /// `pool` goes through a transaction pooler (ha/pgbouncer.sh), where the application's
    /// `sqlx::migrate!` (a session-level lock) and statements outside a transaction (sqlx
    /// prepares in one round trip and executes in the next) cannot run.
    fn direct_pool(db: &Self::Db, pool: &Pool<Self>) -> impl Future<Output = Pool<Self>>;

    /// The text column `sql` returns, row by row.
    fn texts(pool: &Pool<Self>, sql: &str) -> impl Future<Output = Vec<String>>;

    /// The one integer `sql` returns.
    fn scalar(pool: &Pool<Self>, sql: &str) -> impl Future<Output = i64>;

    /// Rows in `orders` that belong to `account`.
    fn orders_of(pool: &Pool<Self>, account: i64) -> impl Future<Output = i64>;

    /// Every key row, in no particular order.
    fn key_rows(pool: &Pool<Self>) -> impl Future<Output = Vec<KeyRow>>;

    /// `expires_at - created_at` of every key row, in seconds.
    fn retentions(pool: &Pool<Self>) -> impl Future<Output = Vec<i64>>;

    /// The key row's `(state, recovery_point, fencing_token, lease held now)`.
    fn key_state(pool: &Pool<Self>, key: &str)
    -> impl Future<Output = (String, String, i64, bool)>;

    /// Moves `key`'s retention and lease one second into the past, as if the client came
    /// back after the retention (a phone offline for a day, a queue redelivering late).
    fn expire_key(pool: &Pool<Self>, key: &str) -> impl Future<Output = ()>;
}

/// Implements [`TestBackend`]: the same statements on both databases, but for how a
/// retention is read from the two timestamps and how a lease is compared with now.
macro_rules! test_backend {
    ($db:ty, $test_db:ty, $open:expr, $direct_pool:path, $retention:literal, $leased:literal, $past:literal) => {
        impl TestBackend for $db {
            type Db = $test_db;

            fn axum_router(idem: &idem::Idem<Self>) -> axum::Router {
                axum_app::router(idem)
            }

            async fn open() -> ($test_db, Pool<Self>) {
                let db = $open;
                let pool = db.pool(POOL_SIZE).await;
                (db, pool)
            }

            fn url(db: &$test_db) -> String {
                db.url().to_owned()
            }

            async fn direct_pool(db: &$test_db, pool: &Pool<Self>) -> Pool<Self> {
                $direct_pool(db, pool).await
            }

            async fn texts(pool: &Pool<Self>, sql: &str) -> Vec<String> {
                sqlx::query_scalar(AssertSqlSafe(sql.to_owned()))
                    .fetch_all(pool)
                    .await
                    .unwrap_or_else(|error| panic!("{sql}: {error}"))
            }

            async fn scalar(pool: &Pool<Self>, sql: &str) -> i64 {
                sqlx::query_scalar(AssertSqlSafe(sql.to_owned()))
                    .fetch_one(pool)
                    .await
                    .unwrap_or_else(|error| panic!("{sql}: {error}"))
            }

            async fn orders_of(pool: &Pool<Self>, account: i64) -> i64 {
                sqlx::query_scalar("SELECT count(*) FROM orders WHERE account_id = $1")
                    .bind(account)
                    .fetch_one(pool)
                    .await
                    .expect("count orders")
            }

            async fn key_rows(pool: &Pool<Self>) -> Vec<KeyRow> {
                sqlx::query_as("SELECT scope, idem_key, state, response_status FROM idem_keys")
                    .fetch_all(pool)
                    .await
                    .expect("read idem_keys")
            }

            async fn key_state(pool: &Pool<Self>, key: &str) -> (String, String, i64, bool) {
                sqlx::query_as(concat!(
                    "SELECT state, recovery_point, fencing_token, ",
                    $leased,
                    " FROM idem_keys WHERE idem_key = $1"
                ))
                .bind(key)
                .fetch_one(pool)
                .await
                .expect("read the key row")
            }

            async fn expire_key(pool: &Pool<Self>, key: &str) {
                let expired = sqlx::query(concat!(
                    "UPDATE idem_keys SET expires_at = ",
                    $past,
                    ", locked_until = ",
                    $past,
                    " WHERE idem_key = $1"
                ))
                .bind(key)
                .execute(pool)
                .await
                .expect("move the key's times into the past");
                assert_eq!(expired.rows_affected(), 1, "the key {key} exists");
            }

            async fn retentions(pool: &Pool<Self>) -> Vec<i64> {
                sqlx::query_scalar(concat!("SELECT ", $retention, " FROM idem_keys"))
                    .fetch_all(pool)
                    .await
                    .expect("read retentions")
            }
        }
    };
}

test_backend!(
    Postgres,
    TestDb,
    TestDb::new().await,
    direct_pool_when_pooled,
    "extract(epoch FROM expires_at - created_at)::int8",
    "coalesce(locked_until > clock_timestamp(), false)",
    "now() - interval '1 second'"
);
test_backend!(
    Sqlite,
    TestSqlite,
    TestSqlite::new(),
    same_pool,
    "(expires_at - created_at) / 1000000",
    "coalesce(locked_until > CAST(unixepoch('subsec') * 1000000 AS INTEGER), 0)",
    "CAST(unixepoch('subsec') * 1000000 AS INTEGER) - 1000000"
);

async fn direct_pool_when_pooled(db: &TestDb, pool: &Pool<Postgres>) -> Pool<Postgres> {
    if db.is_pooled() {
        db.direct_pool(POOL_SIZE).await
    } else {
        pool.clone()
    }
}

async fn same_pool(_db: &TestSqlite, pool: &Pool<Sqlite>) -> Pool<Sqlite> {
    pool.clone()
}

/// A fresh database with idem's and the example's migrations applied.
pub(crate) struct Env<DB: TestBackend = Postgres> {
    /// Kept so the database outlives the test (it is dropped with the value).
    pub(crate) db: DB::Db,
    /// For the test's own reads and writes: never through a pooler.
    pub(crate) pool: Pool<DB>,
    /// The one idem and the application get: through the pooler when there is one.
    pub(crate) served_pool: Pool<DB>,
}

impl Env {
    /// A fresh PostgreSQL database.
    pub(crate) async fn new() -> Self {
        Self::open().await
    }
}

impl<DB: TestBackend> Env<DB> {
    /// A fresh database of `DB`.
    pub(crate) async fn open() -> Self {
        let (db, served_pool) = DB::open().await;
        let pool = DB::direct_pool(&db, &served_pool).await;
        app::setup(&pool)
            .await
            .expect("migrations apply to a fresh database");
        Self {
            db,
            pool,
            served_pool,
        }
    }

    /// idem with its defaults, on this database.
    pub(crate) fn idem(&self) -> idem::Idem<DB> {
        idem::Idem::new(self.served_pool.clone())
    }

    /// Rows in the example's `orders` table.
    pub(crate) async fn orders(&self) -> i64 {
        DB::scalar(&self.pool, "SELECT count(*) FROM orders").await
    }

    /// Rows in `orders` that belong to `account`.
    pub(crate) async fn orders_of(&self, account: i64) -> i64 {
        DB::orders_of(&self.pool, account).await
    }

    /// Rows in idem's key table.
    pub(crate) async fn keys(&self) -> i64 {
        DB::scalar(&self.pool, "SELECT count(*) FROM idem_keys").await
    }

    /// `(scope, key, state, response_status)` of every key row, ordered by the bytes of
    /// scope and key.
    pub(crate) async fn key_rows(&self) -> Vec<KeyRow> {
        let mut rows = DB::key_rows(&self.pool).await;
        rows.sort();
        rows
    }
}
