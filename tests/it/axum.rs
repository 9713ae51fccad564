//! axum handlers under `#[idem::axum::idempotent]`, over real HTTP (a server on
//! 127.0.0.1:0 and reqwest) against PostgreSQL and SQLite: the replay of status,
//! allow-listed headers and exact body bytes, the 422 for a different body, one execution
//! among concurrent duplicates, the rollback of a 5xx, the 413, and extractor rejections
//! answered before any key is claimed. The user's `State`, `Path`, `Json` and a custom
//! `FromRequestParts` run on the buffered body.

use crate::axum_support;
use crate::support;

use std::sync::atomic::Ordering;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::post;
use axum::{Extension, Json, Router};
use axum_support::{Account, Counter, NewOrder, Reply};
use futures_util::future::join_all;
use serde_json::{Value, json};
use support::{ALICE, BOB, Env, TestBackend};

/// The same handlers on each database: axum handlers made idempotent are not generic.
macro_rules! handlers {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::*;

            #[idem::axum::idempotent(scope = account, retention = "24h")]
            pub(crate) async fn create_order(
                State(counter): State<Counter>,
                account: Account,
                Path(shop): Path<String>,
                tx: idem::Tx<'_, $db>,
                Json(order): Json<NewOrder>,
            ) -> Result<(StatusCode, HeaderMap, Json<Value>), StatusCode> {
                let run = counter.0.fetch_add(1, Ordering::SeqCst) + 1;
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO orders (account_id, item, quantity, amount_cents) \
                     VALUES ($1, $2, $3, 0) RETURNING id",
                )
                .bind(account.0)
                .bind(&order.item)
                .bind(order.quantity)
                .fetch_one(&mut *tx)
                .await
                .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
                // Slow enough that concurrent duplicates find the key held.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                let mut headers = HeaderMap::new();
                headers.insert(header::LOCATION, format!("/orders/{id}").parse().unwrap());
                headers.insert("x-not-allowed", "dropped on replay".parse().unwrap());
                let body = json!({ "id": id, "shop": shop, "item": order.item, "run": run });
                Ok((StatusCode::CREATED, headers, Json(body)))
            }

            /// The phased form: the order in its own phase, and a key derived for the next
            /// step's provider.
            #[idem::axum::idempotent(scope = account, lease = "30s")]
            pub(crate) async fn phased_order(
                State(counter): State<Counter>,
                account: Account,
                phases: idem::Phases<$db>,
                Json(order): Json<NewOrder>,
            ) -> Result<(StatusCode, Json<Value>), idem::phased::PhaseError> {
                let id: i64 = phases
                    .run("order_created", async |mut tx| {
                        counter.0.fetch_add(1, Ordering::SeqCst);
                        sqlx::query_scalar(
                            "INSERT INTO orders (account_id, item, quantity, amount_cents) \
                             VALUES ($1, $2, $3, 0) RETURNING id",
                        )
                        .bind(account.0)
                        .bind(&order.item)
                        .bind(order.quantity)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(idem::phased::PhaseError::from)
                    })
                    .await?;
                let charge = phases.derived_key("charge");
                Ok((StatusCode::CREATED, Json(json!({ "id": id, "charge": charge }))))
            }

            /// `state = Counter`: the handler is for the router's one state, and its
            /// extractors (`State<Counter>` among them) run as without it.
            #[idem::axum::idempotent(scope = account, state = Counter)]
            pub(crate) async fn stated_order(
                State(counter): State<Counter>,
                account: Account,
                tx: idem::Tx<'_, $db>,
                Json(order): Json<NewOrder>,
            ) -> (StatusCode, Json<Value>) {
                let run = counter.0.fetch_add(1, Ordering::SeqCst) + 1;
                sqlx::query(
                    "INSERT INTO orders (account_id, item, quantity, amount_cents) \
                     VALUES ($1, $2, $3, 0)",
                )
                .bind(account.0)
                .bind(&order.item)
                .bind(order.quantity)
                .execute(&mut *tx)
                .await
                .expect("insert");
                let body = json!({ "account": account.0, "item": order.item, "run": run });
                (StatusCode::CREATED, Json(body))
            }

            /// Writes an order, then fails: the write and the key roll back.
            #[idem::axum::idempotent(scope = account)]
            pub(crate) async fn failing(
                State(counter): State<Counter>,
                account: Account,
                tx: idem::Tx<'_, $db>,
                body: String,
            ) -> (StatusCode, String) {
                counter.0.fetch_add(1, Ordering::SeqCst);
                sqlx::query(
                    "INSERT INTO orders (account_id, item, quantity, amount_cents) \
                     VALUES ($1, $2, 1, 0)",
                )
                .bind(account.0)
                .bind(body)
                .execute(&mut *tx)
                .await
                .expect("insert");
                (StatusCode::SERVICE_UNAVAILABLE, "try later".to_owned())
            }
        }
    };
}

handlers!(on_postgres, sqlx::Postgres);
handlers!(on_sqlite, sqlx::Sqlite);

/// The application's router for a database.
trait AxumBackend: TestBackend {
    fn routes() -> Router<Counter>;
}

impl AxumBackend for sqlx::Postgres {
    fn routes() -> Router<Counter> {
        Router::new()
            .route("/shops/{shop}/orders", post(on_postgres::create_order))
            .route("/failing", post(on_postgres::failing))
            .route("/stated", post(on_postgres::stated_order))
            .route("/phased", post(on_postgres::phased_order))
    }
}

impl AxumBackend for sqlx::Sqlite {
    fn routes() -> Router<Counter> {
        Router::new()
            .route("/shops/{shop}/orders", post(on_sqlite::create_order))
            .route("/failing", post(on_sqlite::failing))
            .route("/stated", post(on_sqlite::stated_order))
            .route("/phased", post(on_sqlite::phased_order))
    }
}

/// The shared server (tests/axum_support) serving the router with `idem`, and how many
/// times a handler body ran.
struct Server {
    inner: axum_support::Server,
    runs: Counter,
}

impl Server {
    async fn start<DB: AxumBackend>(idem: idem::Idem<DB>) -> Self {
        let runs = Counter::default();
        let app = DB::routes().layer(Extension(idem)).with_state(runs.clone());
        Self {
            inner: axum_support::Server::start(app).await,
            runs,
        }
    }

    fn runs(&self) -> usize {
        self.runs.0.load(Ordering::SeqCst)
    }

    async fn post(&self, path: &str, account: Option<i64>, key: Option<&str>, body: &str) -> Reply {
        let mut request = self
            .inner
            .post(path)
            .header("content-type", "application/json")
            .body(body.to_owned());
        if let Some(account) = account {
            request = request.header("x-account-id", account.to_string());
        }
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        axum_support::Server::send(request).await
    }
}

const ORDER: &str = r#"{"item": "tea", "quantity": 2}"#;

async fn a_repeat_replays_status_allowed_headers_and_exact_body<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let server = Server::start(env.idem()).await;

    let first = server
        .post("/shops/north/orders", Some(ALICE), Some("k-1"), ORDER)
        .await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.replayed());
    let order = first.json();
    assert_eq!(order["shop"], "north", "the Path extractor ran");
    assert_eq!(
        order["item"], "tea",
        "the Json extractor read the buffered body"
    );
    assert_eq!(order["run"], 1, "the State extractor ran");
    let location = format!("/orders/{}", order["id"]);
    assert_eq!(first.header("location"), Some(location.as_str()));

    // The same JSON, spelled differently: the same request to the fingerprint.
    let respelled = r#"{ "quantity": 2, "item": "tea" }"#;
    for body in [ORDER, respelled] {
        let again = server
            .post("/shops/north/orders", Some(ALICE), Some("k-1"), body)
            .await;
        assert_eq!(again.status, 201);
        assert!(again.replayed(), "{again:?}");
        assert_eq!(again.body, first.body, "the exact bytes");
        assert_eq!(again.header("location"), Some(location.as_str()));
        assert_eq!(again.header("content-type"), Some("application/json"));
        assert_eq!(again.header("x-not-allowed"), None, "not allow-listed");
    }
    assert_eq!(server.runs(), 1, "replays do not run the handler");
    assert_eq!(env.orders().await, 1);
    assert_eq!(
        env.key_rows().await,
        [(
            ALICE.to_string(),
            "k-1".to_owned(),
            "completed".to_owned(),
            Some(201)
        )]
    );

    // Another caller's same key is another key.
    let bob = server
        .post("/shops/north/orders", Some(BOB), Some("k-1"), ORDER)
        .await;
    assert_eq!(bob.status, 201);
    assert!(!bob.replayed());
    assert_eq!(server.runs(), 2);
}

async fn a_different_body_or_path_is_422<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let server = Server::start(env.idem()).await;
    let first = server
        .post("/shops/north/orders", Some(ALICE), Some("k-2"), ORDER)
        .await;
    assert_eq!(first.status, 201);

    let other_body = server
        .post(
            "/shops/north/orders",
            Some(ALICE),
            Some("k-2"),
            r#"{"item": "tea", "quantity": 3}"#,
        )
        .await;
    other_body.assert_problem(422, "idempotency-key-reused");
    assert_eq!(other_body.json()["mismatch"], "body");

    let other_path = server
        .post("/shops/south/orders", Some(ALICE), Some("k-2"), ORDER)
        .await;
    other_path.assert_problem(422, "idempotency-key-reused");
    assert_eq!(other_path.json()["mismatch"], "method_or_path");
    assert_eq!(server.runs(), 1);
    assert_eq!(env.orders().await, 1);
}

async fn concurrent_duplicates_run_the_handler_once<DB: AxumBackend>() {
    const PARALLEL: usize = 12;
    let env = Env::<DB>::open().await;
    let server = Server::start(env.idem()).await;
    let replies = join_all(
        (0..PARALLEL).map(|_| server.post("/shops/north/orders", Some(ALICE), Some("same"), ORDER)),
    )
    .await;

    let originals: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status == 201 && !r.replayed())
        .collect();
    assert_eq!(originals.len(), 1, "exactly one runs: {replies:#?}");
    for reply in &replies {
        if std::ptr::eq(reply, originals[0]) {
            continue;
        }
        if reply.status == 409 {
            reply.assert_problem(409, "request-in-progress");
            assert_eq!(reply.header("retry-after"), Some("1"));
        } else {
            assert!(reply.replayed(), "{reply:?}");
            assert_eq!(reply.body, originals[0].body);
        }
    }
    assert_eq!(server.runs(), 1, "one execution");
    assert_eq!(env.orders().await, 1, "one order row");
}

async fn a_5xx_rolls_back_the_writes_and_the_key<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let server = Server::start(env.idem()).await;
    for attempt in 1..=2 {
        let reply = server
            .post("/failing", Some(ALICE), Some("k-5xx"), "\"cake\"")
            .await;
        assert_eq!(reply.status, 503);
        assert_eq!(reply.body, b"try later");
        assert!(!reply.replayed());
        assert_eq!(server.runs(), attempt, "a retry runs the handler again");
    }
    assert_eq!(env.orders().await, 0, "the write rolled back");
    assert_eq!(env.keys().await, 0, "the key rolled back");
}

async fn a_body_over_the_limit_is_413<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let server = Server::start(env.idem().max_request_bytes(64)).await;
    let big = format!(r#"{{"item": "{}", "quantity": 1}}"#, "x".repeat(100));
    let reply = server
        .post("/shops/north/orders", Some(ALICE), Some("k-big"), &big)
        .await;
    reply.assert_problem(413, "request-body-too-large");
    assert_eq!(server.runs(), 0);
    assert_eq!(env.keys().await, 0);
}

async fn extractor_rejections_answer_before_any_claim<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let server = Server::start(env.idem()).await;

    // The custom FromRequestParts extractor: 401, even without a key.
    let anonymous = server.post("/shops/north/orders", None, None, ORDER).await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.body, b"send X-Account-Id");

    // The last extractor (Json) rejects the body with axum's own answer.
    let malformed = server
        .post(
            "/shops/north/orders",
            Some(ALICE),
            Some("k-bad"),
            r#"{"item": "#,
        )
        .await;
    assert_eq!(malformed.status, 400, "{malformed:?}");
    let wrong_shape = server
        .post(
            "/shops/north/orders",
            Some(ALICE),
            Some("k-bad"),
            r#"{"item": 5}"#,
        )
        .await;
    assert_eq!(wrong_shape.status, 422, "{wrong_shape:?}");
    assert!(
        wrong_shape.header("content-type") != Some("application/problem+json"),
        "axum's rejection, not idem's 422"
    );
    assert_eq!(server.runs(), 0);
    assert_eq!(env.keys().await, 0, "no key row written");

    // With the extractors satisfied, a missing key is idem's 400.
    let keyless = server
        .post("/shops/north/orders", Some(ALICE), None, ORDER)
        .await;
    keyless.assert_problem(400, "idempotency-key-missing");
    assert_eq!(env.keys().await, 0);
}

async fn the_phased_form_replays_its_final_answer<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let server = Server::start(env.idem()).await;
    let first = server
        .post("/phased", Some(ALICE), Some("k-phased"), ORDER)
        .await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.replayed());
    let charge = first.json()["charge"].as_str().unwrap().to_owned();
    assert!(!charge.is_empty());

    let again = server
        .post("/phased", Some(ALICE), Some("k-phased"), ORDER)
        .await;
    assert!(again.replayed(), "{again:?}");
    assert_eq!(again.body, first.body);
    assert_eq!(server.runs(), 1, "the phase ran once");
    assert_eq!(env.orders().await, 1);
    let (state, recovery_point, _, leased) = DB::key_state(&env.pool, "k-phased").await;
    assert_eq!(state, "completed");
    assert_eq!(recovery_point, "order_created");
    assert!(!leased, "the lease is released");
}

async fn a_handler_for_one_state_runs_once_and_replays<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let server = Server::start(env.idem()).await;
    let first = server
        .post("/stated", Some(ALICE), Some("k-stated"), ORDER)
        .await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.replayed());
    assert_eq!(
        first.json(),
        json!({ "account": ALICE, "item": "tea", "run": 1 }),
        "the State, the custom extractor and Json ran"
    );

    let again = server
        .post("/stated", Some(ALICE), Some("k-stated"), ORDER)
        .await;
    assert!(again.replayed(), "{again:?}");
    assert_eq!(again.body, first.body);
    assert_eq!(server.runs(), 1, "the replay did not run the handler");
    assert_eq!(env.orders().await, 1);
}

axum_support::axum_backend_tests!(
    a_repeat_replays_status_allowed_headers_and_exact_body,
    a_different_body_or_path_is_422,
    concurrent_duplicates_run_the_handler_once,
    a_5xx_rolls_back_the_writes_and_the_key,
    a_body_over_the_limit_is_413,
    extractor_rejections_answer_before_any_claim,
    the_phased_form_replays_its_final_answer,
    a_handler_for_one_state_runs_once_and_replays,
);
