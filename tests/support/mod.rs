//! Shared by the integration tests: the example's application on a fresh database
//! (PostgreSQL, or a SQLite file), requests to it, and what the database holds afterwards.
//!
//! Every test file says `mod support;` and uses the part it needs. A test written once as
//! `async fn name<DB: TestBackend>()` runs on both databases with
//! `support::backend_tests!(name, ..)`.
#![allow(dead_code)]

#[path = "../../examples/orders/app.rs"]
pub(crate) mod app;
pub(crate) mod held;

use std::future::Future;
use std::rc::Rc;

use actix_web::App;
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use actix_web::test::{self, TestRequest};
use actix_web::web::{self, Bytes};
use futures_util::future::LocalBoxFuture;
use idem_testkit::{TestDb, TestSqlite};
use serde_json::Value;
use sqlx::{AssertSqlSafe, Pool, Postgres, Sqlite};

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

/// Instantiates each generic test `name::<DB>()` once per database, as
/// `postgres::name` and `sqlite::name`, so one test command runs both.
#[allow(unused_macros)] // Each test file uses the part of this module it needs.
macro_rules! backend_tests {
    ($($name:ident),+ $(,)?) => {
        mod postgres {
            $(
                #[actix_web::test]
                async fn $name() {
                    super::$name::<sqlx::Postgres>().await;
                }
            )+
        }
        mod sqlite {
            $(
                #[actix_web::test]
                async fn $name() {
                    super::$name::<sqlx::Sqlite>().await;
                }
            )+
        }
    };
}
#[allow(unused_imports)]
pub(crate) use backend_tests;

/// `(scope, key, state, response_status)` of a key row.
pub(crate) type KeyRow = (String, String, String, Option<i16>);

/// A database the tests run on: how to get a fresh one, and the few reads whose SQL
/// differs.
pub(crate) trait TestBackend: app::Store {
    /// The test database, dropped (and deleted) at the end of the test.
    type Db;

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

/// The application under test, in-process: requests go straight to its service.
pub(crate) struct TestApp {
    send: Box<dyn Fn(TestRequest) -> LocalBoxFuture<'static, Reply>>,
}

impl TestApp {
    /// Sends a request and reads the whole response. Calls may run concurrently.
    pub(crate) fn call(&self, req: TestRequest) -> LocalBoxFuture<'static, Reply> {
        (self.send)(req)
    }
}

/// The example's application with `idem`, plus whatever `extra` registers (test-only
/// handlers and their app data).
pub(crate) async fn service_with<DB: app::Store>(
    idem: &idem::Idem<DB>,
    extra: impl FnOnce(&mut web::ServiceConfig),
) -> TestApp {
    build(idem, |_| {}, extra).await
}

/// The example's application with `extra` registered before it: for a test route on one
/// of the example's paths with another method, which the example's resource for that
/// path would otherwise answer 405.
pub(crate) async fn service_before<DB: app::Store>(
    idem: &idem::Idem<DB>,
    extra: impl FnOnce(&mut web::ServiceConfig),
) -> TestApp {
    build(idem, extra, |_| {}).await
}

async fn build<DB: app::Store>(
    idem: &idem::Idem<DB>,
    before: impl FnOnce(&mut web::ServiceConfig),
    after: impl FnOnce(&mut web::ServiceConfig),
) -> TestApp {
    let service = Rc::new(
        test::init_service(
            App::new()
                .configure(before)
                .configure(|cfg| app::configure(cfg, idem))
                .configure(after),
        )
        .await,
    );
    // Boxing here keeps actix's request type (from actix-http, not a dependency of this
    // crate) out of every signature.
    TestApp {
        send: Box::new(move |req| {
            let service = Rc::clone(&service);
            Box::pin(async move {
                let response = test::call_service(&*service, req.to_request()).await;
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                let body = test::read_body(response).await;
                Reply {
                    status,
                    headers,
                    body,
                }
            })
        }),
    }
}

/// The example's application exactly as `main` builds it.
pub(crate) async fn service<DB: app::Store>(idem: &idem::Idem<DB>) -> TestApp {
    service_with(idem, |_| {}).await
}

/// A response taken apart: status, headers and the exact body bytes.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Reply {
    /// The one value of header `name`, as text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let mut values = self.headers.get_all(name);
        let value = values.next()?;
        assert!(
            values.next().is_none(),
            "header {name} appears more than once"
        );
        Some(value.to_str().expect("header value is text"))
    }

    /// Whether idem marked this response as a replay (`Idempotent-Replayed: true`).
    /// Any other value of the header fails the test.
    pub(crate) fn replayed(&self) -> bool {
        match self.header("idempotent-replayed") {
            None => false,
            Some("true") => true,
            Some(other) => panic!("Idempotent-Replayed: {other:?}"),
        }
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "body is not JSON ({error}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Asserts a problem+json response with this status and `type`; returns its body.
    pub(crate) fn assert_problem(&self, status: u16, type_uri: &str) -> Value {
        assert_eq!(
            self.status,
            status,
            "status; body: {}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let body = self.json();
        assert_eq!(body["type"], type_uri, "problem type; body: {body}");
        assert_eq!(
            body["status"], status,
            "problem status member; body: {body}"
        );
        assert!(
            body["title"].as_str().is_some_and(|t| !t.is_empty()),
            "problem title; body: {body}"
        );
        body
    }

    /// Asserts one of idem's problems, e.g. `assert_idem_problem(409, "request-in-progress")`.
    pub(crate) fn assert_idem_problem(&self, status: u16, slug: &str) -> Value {
        self.assert_problem(status, &format!("{IDEM_PROBLEM}{slug}"))
    }

    /// Asserts one of the example's problems, e.g. `assert_app_problem(402, "card-declined")`.
    pub(crate) fn assert_app_problem(&self, status: u16, slug: &str) -> Value {
        self.assert_problem(status, &format!("{APP_PROBLEM}{slug}"))
    }

    /// Asserts a 201 from `POST /orders` that ran the handler (not a replay); returns the
    /// order's id.
    pub(crate) fn assert_created(&self) -> i64 {
        assert_eq!(
            self.status,
            201,
            "status; body: {}",
            String::from_utf8_lossy(&self.body)
        );
        assert!(
            !self.replayed(),
            "an original response is not marked as replayed"
        );
        let id = self.json()["id"]
            .as_i64()
            .expect("the order has an integer id");
        assert_eq!(
            self.header("location"),
            Some(format!("/orders/{id}").as_str())
        );
        assert_eq!(self.header("content-type"), Some("application/json"));
        id
    }

    /// Asserts that this is a replay of `original`: the same status, the same body bytes,
    /// the same replayable headers, plus `Idempotent-Replayed: true`.
    pub(crate) fn assert_replay_of(&self, original: &Reply) {
        assert!(!original.replayed(), "the original is not itself a replay");
        assert!(
            self.replayed(),
            "a replay carries Idempotent-Replayed: true"
        );
        assert_eq!(self.status, original.status, "replayed status");
        assert_eq!(self.body, original.body, "replayed body bytes");
        for name in [
            "location",
            "content-type",
            "content-location",
            "etag",
            "last-modified",
        ] {
            assert_eq!(
                self.header(name),
                original.header(name),
                "replayed {name} header"
            );
        }
    }
}

/// A JSON order body in compact form.
pub(crate) fn order_json(item: &str, quantity: i64, amount_cents: i64) -> String {
    serde_json::json!({ "item": item, "quantity": quantity, "amount_cents": amount_cents })
        .to_string()
}

/// `POST uri` as `account` with a JSON `body` and no idempotency key.
pub(crate) fn post_unkeyed(uri: &str, account: i64, body: &str) -> TestRequest {
    TestRequest::post()
        .uri(uri)
        .insert_header(("x-account-id", account.to_string()))
        .insert_header(("content-type", "application/json"))
        .set_payload(body.to_owned())
}

/// `POST uri` as `account` with `Idempotency-Key: key` and a JSON `body`.
pub(crate) fn post(uri: &str, account: i64, key: &str, body: &str) -> TestRequest {
    post_raw_key(uri, account, key.as_bytes(), body)
}

/// Like [`post`], with the key header's raw bytes (for non-ASCII keys).
pub(crate) fn post_raw_key(uri: &str, account: i64, key: &[u8], body: &str) -> TestRequest {
    let key = HeaderValue::from_bytes(key).expect("bytes allowed in a header value");
    post_unkeyed(uri, account, body)
        .insert_header((HeaderName::from_static("idempotency-key"), key))
}

/// `POST /orders` as `account` with `Idempotency-Key: key`.
pub(crate) fn post_order(account: i64, key: &str, body: &str) -> TestRequest {
    post("/orders", account, key, body)
}

/// `GET uri` as `account`.
pub(crate) fn get(uri: &str, account: i64) -> TestRequest {
    TestRequest::get()
        .uri(uri)
        .insert_header(("x-account-id", account.to_string()))
}
