//! `idem::axum::IdempotencyLayer` and its `Tx` extractor, over real HTTP (a server on
//! 127.0.0.1:0 and reqwest) on PostgreSQL and SQLite: the guarantees of the attribute
//! kept by a layer. The key is claimed in the transaction the handler writes through; a
//! repeat replays status, allow-listed headers and exact bytes; concurrent duplicates run
//! the handler once; a different body is 422; a 5xx or a panic rolls back the writes and
//! the key; a body over the limit is 413; the scope's rejection comes before any claim.

use crate::axum_support;
use crate::support;

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use axum_support::{Account, Counter, NewOrder, Reply, Server, axum_backend_tests};
use futures_util::future::join_all;
use serde_json::{Value, json};
use support::{ALICE, BOB, Env, TestBackend};

static CREATE_ORDER: idem::Policy =
    idem::Policy::new("create_order", module_path!(), "account", 86_400);
static LEAKY: idem::Policy = idem::Policy::new("leaky", module_path!(), "account", 86_400);
static FAILING: idem::Policy = idem::Policy::new("failing", module_path!(), "account", 86_400);

/// Plain axum handlers, the same on each database.
macro_rules! handlers {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::*;

            pub(crate) async fn create_order(
                State(counter): State<Counter>,
                account: Account,
                mut tx: idem::Tx<'static, $db>,
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
                let body = json!({ "id": id, "item": order.item, "run": run });
                Ok((StatusCode::CREATED, headers, Json(body)))
            }

            /// Writes an order, then fails as `?fail=` says: a 503 or a panic.
            pub(crate) async fn failing(
                State(counter): State<Counter>,
                account: Account,
                mut tx: idem::Tx<'static, $db>,
                body: String,
            ) -> (StatusCode, String) {
                counter.0.fetch_add(1, Ordering::SeqCst);
                sqlx::query(
                    "INSERT INTO orders (account_id, item, quantity, amount_cents) \
                     VALUES ($1, $2, 1, 0)",
                )
                .bind(account.0)
                .bind(&body)
                .execute(&mut *tx)
                .await
                .expect("insert");
                if body == "\"panic\"" {
                    panic!("the handler fails after its write");
                }
                (StatusCode::SERVICE_UNAVAILABLE, "try later".to_owned())
            }

            /// Answers while a task of its own still holds its `Tx`.
            pub(crate) async fn leaky(account: Account, mut tx: idem::Tx<'static, $db>) -> &'static str {
                sqlx::query(
                    "INSERT INTO orders (account_id, item, quantity, amount_cents) \
                     VALUES ($1, 'leaked', 1, 0)",
                )
                .bind(account.0)
                .execute(&mut *tx)
                .await
                .expect("insert");
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    drop(tx);
                });
                "answered"
            }

            /// A handler taking `Tx` without a layer in front.
            pub(crate) async fn unlayered(mut tx: idem::Tx<'static, $db>) -> &'static str {
                let _ = &mut *tx;
                "never"
            }

            pub(crate) fn routes() -> Router<Counter> {
                type Layer = idem::axum::IdempotencyLayer<$db, Account>;
                Router::new()
                    .route(
                        "/orders",
                        post(create_order)
                            .get(|| async { "a read, untouched" })
                            .route_layer(Layer::new(&CREATE_ORDER)),
                    )
                    .route(
                        "/failing",
                        post(failing).route_layer(Layer::new(&FAILING)),
                    )
                    .route("/unlayered", post(unlayered))
                    .route("/leaky", post(leaky).route_layer(Layer::new(&LEAKY)))
                    .route("/ping", get(|| async { "pong" }))
            }
        }
    };
}

handlers!(on_postgres, sqlx::Postgres);
handlers!(on_sqlite, sqlx::Sqlite);

trait AxumBackend: TestBackend {
    fn routes() -> Router<Counter>;
}

impl AxumBackend for sqlx::Postgres {
    fn routes() -> Router<Counter> {
        on_postgres::routes()
    }
}

impl AxumBackend for sqlx::Sqlite {
    fn routes() -> Router<Counter> {
        on_sqlite::routes()
    }
}

async fn start<DB: AxumBackend>(idem: idem::Idem<DB>) -> (Server, Counter) {
    let runs = Counter::default();
    let app = DB::routes().layer(Extension(idem)).with_state(runs.clone());
    (Server::start(app).await, runs)
}

fn order(
    server: &Server,
    account: Option<i64>,
    key: Option<&str>,
    body: &str,
) -> reqwest::RequestBuilder {
    request(server, "/orders", account, key, body)
}

fn request(
    server: &Server,
    path: &str,
    account: Option<i64>,
    key: Option<&str>,
    body: &str,
) -> reqwest::RequestBuilder {
    let mut request = server
        .post(path)
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(account) = account {
        request = request.header("x-account-id", account.to_string());
    }
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request
}

fn runs(counter: &Counter) -> usize {
    counter.0.load(Ordering::SeqCst)
}

const ORDER: &str = r#"{"item": "tea", "quantity": 2}"#;

async fn a_repeat_replays_status_allowed_headers_and_exact_body<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let (server, counter) = start(env.idem()).await;

    let first = Server::send(order(&server, Some(ALICE), Some("k-1"), ORDER)).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.replayed());
    let created = first.json();
    assert_eq!(
        created["item"], "tea",
        "the handler's Json read the buffered body"
    );
    let location = format!("/orders/{}", created["id"]);
    assert_eq!(first.header("location"), Some(location.as_str()));

    // The same JSON, spelled differently: the same request to the fingerprint.
    for body in [ORDER, r#"{ "quantity": 2, "item": "tea" }"#] {
        let again = Server::send(order(&server, Some(ALICE), Some("k-1"), body)).await;
        again.assert_replay_of(&first);
        assert_eq!(again.header("location"), Some(location.as_str()));
        assert_eq!(again.header("content-type"), Some("application/json"));
        assert_eq!(again.header("x-not-allowed"), None, "not allow-listed");
    }
    assert_eq!(runs(&counter), 1, "replays do not run the handler");
    assert_eq!(env.orders().await, 1);
    assert_eq!(
        env.key_rows().await,
        [(
            ALICE.to_string(),
            "k-1".to_owned(),
            "completed".to_owned(),
            Some(201)
        )],
        "the key row committed with the order"
    );

    // Another caller's same key is another key.
    let bob = Server::send(order(&server, Some(BOB), Some("k-1"), ORDER)).await;
    assert_eq!(bob.status, 201);
    assert!(!bob.replayed());
    assert_eq!(runs(&counter), 2);

    // Reads pass through the layer without a key.
    let read = Server::send(server.client.get(format!("{}/orders", server.base))).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.body, b"a read, untouched");
}

async fn a_different_body_is_422<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let (server, counter) = start(env.idem()).await;
    let first = Server::send(order(&server, Some(ALICE), Some("k-2"), ORDER)).await;
    assert_eq!(first.status, 201);
    let other = Server::send(order(
        &server,
        Some(ALICE),
        Some("k-2"),
        r#"{"item": "tea", "quantity": 3}"#,
    ))
    .await;
    let problem = other.assert_problem(422, "idempotency-key-reused");
    assert_eq!(problem["mismatch"], "body");
    assert_eq!(runs(&counter), 1);
    assert_eq!(env.orders().await, 1);
}

async fn concurrent_duplicates_run_the_handler_once<DB: AxumBackend>() {
    const PARALLEL: usize = 12;
    let env = Env::<DB>::open().await;
    let (server, counter) = start(env.idem()).await;
    let replies: Vec<Reply> = join_all(
        (0..PARALLEL).map(|_| Server::send(order(&server, Some(ALICE), Some("same"), ORDER))),
    )
    .await;
    let originals: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status == 201 && !r.replayed())
        .collect();
    assert_eq!(originals.len(), 1, "exactly one runs: {replies:#?}");
    for reply in &replies {
        match reply.status {
            201 if reply.replayed() => reply.assert_replay_of(originals[0]),
            201 => {}
            409 => {
                reply.assert_problem(409, "request-in-progress");
                assert_eq!(reply.header("retry-after"), Some("1"));
            }
            other => panic!("a duplicate gets 201 or 409, not {other}: {reply:?}"),
        }
    }
    assert_eq!(runs(&counter), 1, "one execution");
    assert_eq!(env.orders().await, 1, "one order row");
}

async fn a_5xx_or_a_panic_rolls_back_the_writes_and_the_key<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let (server, counter) = start(env.idem()).await;
    for attempt in 1..=2 {
        let reply = Server::send(request(
            &server,
            "/failing",
            Some(ALICE),
            Some("k-5xx"),
            "\"cake\"",
        ))
        .await;
        assert_eq!(reply.status, 503, "{reply:?}");
        assert_eq!(reply.body, b"try later");
        assert!(!reply.replayed());
        assert_eq!(runs(&counter), attempt, "a retry runs the handler again");
    }
    let panicked = Server::send(request(
        &server,
        "/failing",
        Some(ALICE),
        Some("k-panic"),
        "\"panic\"",
    ))
    .await;
    panicked.assert_problem(500, "handler-panicked");
    assert_eq!(env.orders().await, 0, "the writes rolled back");
    assert_eq!(env.keys().await, 0, "and so did the keys");
}

async fn a_body_over_the_limit_is_413<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let (server, counter) = start(env.idem().max_request_bytes(64)).await;
    let big = format!(r#"{{"item": "{}", "quantity": 1}}"#, "x".repeat(100));
    Server::send(order(&server, Some(ALICE), Some("k-big"), &big))
        .await
        .assert_problem(413, "request-body-too-large");
    assert_eq!(runs(&counter), 0);
    assert_eq!(env.keys().await, 0);
}

async fn the_scope_is_checked_before_the_key_and_tx_needs_the_layer<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let (server, counter) = start(env.idem()).await;

    // The scope's rejection, even without a key.
    let anonymous = Server::send(order(&server, None, None, ORDER)).await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.body, b"send X-Account-Id");

    // With a scope, a missing key is idem's 400.
    Server::send(order(&server, Some(ALICE), None, ORDER))
        .await
        .assert_problem(400, "idempotency-key-missing");
    assert_eq!(runs(&counter), 0);
    assert_eq!(env.keys().await, 0, "no key row written");

    // A handler taking Tx with no layer in front: a server bug, said as one.
    Server::send(request(
        &server,
        "/unlayered",
        Some(ALICE),
        Some("k-u"),
        "{}",
    ))
    .await
    .assert_problem(500, "not-configured");
}

/// A handler whose `Tx` outlives its answer: its writes cannot commit with the key, so
/// nothing is kept and the request may be retried.
async fn a_tx_kept_past_the_answer_rolls_back<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let (server, _) = start(env.idem()).await;
    Server::send(request(
        &server,
        "/leaky",
        Some(ALICE),
        Some("k-leak"),
        "{}",
    ))
    .await
    .assert_problem(500, "transaction-ended");
    assert_eq!(env.keys().await, 0, "no key committed");
    assert_eq!(env.orders().await, 0, "no write committed");
}

axum_backend_tests!(
    a_tx_kept_past_the_answer_rolls_back,
    a_repeat_replays_status_allowed_headers_and_exact_body,
    a_different_body_is_422,
    concurrent_duplicates_run_the_handler_once,
    a_5xx_or_a_panic_rolls_back_the_writes_and_the_key,
    a_body_over_the_limit_is_413,
    the_scope_is_checked_before_the_key_and_tx_needs_the_layer,
);

/// A phased policy cannot run behind the layer: refused when the layer is built.
#[test]
#[should_panic(expected = "write the phased handler with #[idem::axum::idempotent")]
fn a_policy_with_a_lease_is_refused() {
    static PHASED: idem::Policy =
        idem::Policy::new("pay", module_path!(), "account", 86_400).with_lease(30_000);
    let _ = idem::axum::IdempotencyLayer::<sqlx::Postgres, Account>::new(&PHASED);
}
