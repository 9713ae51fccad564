//! `idem::testing`, the verification harness, run as an application's tests run it: every
//! check on the example's `POST /orders` (single transaction) and on a phased payment,
//! on actix-web and axum, PostgreSQL and SQLite; and on wrong handlers, each of which a
//! check must catch with a message that names the check and what it saw.

mod support;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{HttpRequest, web};
use axum::Extension;
use idem::phased::PhaseError;
use idem::testing::{Endpoint, Failed, Passed};
use serde_json::json;
use sqlx::Pool;
use support::app::{Account, NewOrder, Store};
use support::{ALICE, Env, Framework, TestBackend, by_database, order_json};

/// The example's provider, in memory: it charges once per `Idempotency-Key` it is sent,
/// as a real payment provider deduplicates by its caller's key, and remembers every key.
#[derive(Debug, Default)]
struct Provider {
    charged: Mutex<BTreeSet<String>>,
    seen: Mutex<Vec<String>>,
}

impl Provider {
    fn charge(&self, key: &str) -> String {
        self.seen.lock().unwrap().push(key.to_owned());
        self.charged.lock().unwrap().insert(key.to_owned());
        format!("ch_{key}")
    }

    /// The effect counter of the payment endpoints: charges made.
    fn charges(&self) -> i64 {
        i64::try_from(self.charged.lock().unwrap().len()).unwrap()
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// A test handler's answer on either framework.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

impl Answer {
    fn created(location: String, body: serde_json::Value) -> Self {
        Self {
            status: 201,
            headers: vec![("location", location)],
            body: body.to_string(),
        }
    }

    fn status(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: format!("{{\"status\":{status}}}"),
        }
    }

    fn with_header(mut self, name: &'static str, value: String) -> Self {
        self.headers.push((name, value));
        self
    }
}

impl actix_web::Responder for Answer {
    type Body = actix_web::body::BoxBody;

    fn respond_to(self, _: &HttpRequest) -> actix_web::HttpResponse {
        let status = actix_web::http::StatusCode::from_u16(self.status).unwrap();
        let mut response = actix_web::HttpResponse::build(status);
        response.content_type("application/json");
        for (name, value) in self.headers {
            response.insert_header((name, value));
        }
        response.body(self.body)
    }
}

impl axum::response::IntoResponse for Answer {
    fn into_response(self) -> axum::response::Response {
        let mut response = axum::response::Response::new(axum::body::Body::from(self.body));
        *response.status_mut() = axum::http::StatusCode::from_u16(self.status).unwrap();
        let headers = response.headers_mut();
        headers.insert("content-type", "application/json".parse().unwrap());
        for (name, value) in self.headers {
            headers.insert(name, value.parse().unwrap());
        }
        response
    }
}

/// The test hooks a handler's test build honours: `x-test-fail` (answer 503 after the
/// work) and `x-test-crash` (crash in the middle of the charge).
#[derive(Debug, Clone, Copy, Default)]
struct Hooks {
    fail: bool,
    crash: bool,
}

impl Hooks {
    fn of(headers: &http::HeaderMap) -> Self {
        Self {
            fail: headers.contains_key("x-test-fail"),
            crash: headers.contains_key("x-test-crash"),
        }
    }

    fn of_actix(req: &HttpRequest) -> Self {
        Self {
            fail: req.headers().contains_key("x-test-fail"),
            crash: req.headers().contains_key("x-test-crash"),
        }
    }
}

/// Keys made up per call, the mistake of a handler that does not derive its provider key.
fn made_up_key() -> String {
    static NEXT: AtomicI64 = AtomicI64::new(0);
    format!("made-up-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A payment: phase `payment_created`, then the charge at the provider in phase
/// `charged` with the derived key (or, when `derive` is false, a key made up per attempt:
/// the mistake `crash_resume` must catch). The crash hook crashes inside `charged`, after
/// the provider call and before the phase commits.
async fn pay<DB: idem::Backend>(
    phases: &mut idem::Phases<DB>,
    provider: &Provider,
    hooks: Hooks,
    derive: bool,
) -> Result<Answer, PhaseError> {
    static NEXT_ID: AtomicI64 = AtomicI64::new(1);
    let id: i64 = phases
        .run("payment_created", async |_tx| {
            Ok::<_, PhaseError>(NEXT_ID.fetch_add(1, Ordering::Relaxed))
        })
        .await?;
    if hooks.fail {
        return Ok(Answer::status(503));
    }
    let key = if derive {
        phases.derived_key("charge")
    } else {
        made_up_key()
    };
    let charge: String = phases
        .run("charged", async |_tx| {
            let charge = provider.charge(&key);
            if hooks.crash {
                match idem::testing::crash().await {}
            }
            Ok::<_, PhaseError>(charge)
        })
        .await?;
    Ok(Answer::created(
        format!("/test/payments/{id}"),
        json!({ "id": id, "charge": charge }),
    ))
}

fn new_order(account: Account, order: &NewOrder) -> Answer {
    let _ = account;
    Answer::created(
        "/orders/new".to_owned(),
        json!({ "item": order.item, "quantity": order.quantity }),
    )
}

/// The test routes on actix-web, generic over the database.
mod actix_routes {
    use super::*;

    /// The correct phased payment.
    #[idem::idempotent(scope = account, lease = "30s")]
    pub(super) async fn payments<DB: TestBackend>(
        account: Account,
        phases: idem::Phases<DB>,
        provider: web::Data<Provider>,
        req: HttpRequest,
    ) -> Result<Answer, PhaseError> {
        let _ = account;
        pay(&mut phases, &provider, Hooks::of_actix(&req), true).await
    }

    /// Wrong: calls the provider with a key made up per attempt.
    #[idem::idempotent(scope = account, lease = "30s")]
    pub(super) async fn made_up_keys<DB: TestBackend>(
        account: Account,
        phases: idem::Phases<DB>,
        provider: web::Data<Provider>,
        req: HttpRequest,
    ) -> Result<Answer, PhaseError> {
        let _ = account;
        pay(&mut phases, &provider, Hooks::of_actix(&req), false).await
    }

    /// Another idempotent route of the same scope, for the mismatch check's other route.
    #[idem::idempotent(scope = account)]
    pub(super) async fn refunds<DB: TestBackend>(
        account: Account,
        tx: idem::Tx<'_, DB>,
        order: web::Json<NewOrder>,
    ) -> Answer {
        let _ = &mut *tx;
        new_order(account, &order)
    }

    /// Wrong: writes the order on the pool, not `tx`, and then answers 503 when asked to
    /// fail; the key rolls back and the order stays.
    #[idem::idempotent(scope = account)]
    pub(super) async fn pool_then_503<DB: TestBackend>(
        account: Account,
        tx: idem::Tx<'_, DB>,
        order: web::Json<NewOrder>,
        pool: web::Data<Pool<DB>>,
        req: HttpRequest,
    ) -> Answer {
        let _ = &mut *tx;
        let mut conn = pool.acquire().await.unwrap();
        DB::insert_order(&mut conn, account.id(), &order)
            .await
            .unwrap();
        if Hooks::of_actix(&req).fail {
            return Answer::status(503);
        }
        new_order(account, &order)
    }

    /// Wrong: no `#[idempotent]` at all.
    pub(super) async fn unannotated<DB: TestBackend>(
        account: Account,
        order: web::Json<NewOrder>,
        pool: web::Data<Pool<DB>>,
    ) -> Answer {
        let mut conn = pool.acquire().await.unwrap();
        DB::insert_order(&mut conn, account.id(), &order)
            .await
            .unwrap();
        new_order(account, &order)
    }

    /// Answers the order's id in `x-order-id`, a header the application never added to
    /// idem's replayed ones: the replay drops it.
    #[idem::idempotent(scope = account)]
    pub(super) async fn order_id_header<DB: TestBackend>(
        account: Account,
        tx: idem::Tx<'_, DB>,
        order: web::Json<NewOrder>,
    ) -> Answer {
        let created = DB::insert_order(&mut tx, account.id(), &order)
            .await
            .unwrap();
        new_order(account, &order).with_header("x-order-id", created.id.to_string())
    }

    pub(super) fn routes<DB: TestBackend>(cfg: &mut web::ServiceConfig) {
        cfg.route("/test/payments", web::post().to(payments::<DB>))
            .route("/test/made-up-keys", web::post().to(made_up_keys::<DB>))
            .route("/test/refunds", web::post().to(refunds::<DB>))
            .route("/test/pool-then-503", web::post().to(pool_then_503::<DB>))
            .route("/test/unannotated", web::post().to(unannotated::<DB>))
            .route(
                "/test/order-id-header",
                web::post().to(order_id_header::<DB>),
            );
    }
}

/// The same routes on axum, once per database (an idempotent axum handler cannot be
/// generic).
macro_rules! axum_twins {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::*;

            #[idem::axum::idempotent(scope = account, lease = "30s")]
            pub(super) async fn payments(
                account: Account,
                phases: idem::Phases<$db>,
                Extension(provider): Extension<Arc<Provider>>,
                headers: axum::http::HeaderMap,
            ) -> Result<Answer, PhaseError> {
                let _ = account;
                pay(&mut phases, &provider, Hooks::of(&headers), true).await
            }

            #[idem::axum::idempotent(scope = account, lease = "30s")]
            pub(super) async fn made_up_keys(
                account: Account,
                phases: idem::Phases<$db>,
                Extension(provider): Extension<Arc<Provider>>,
                headers: axum::http::HeaderMap,
            ) -> Result<Answer, PhaseError> {
                let _ = account;
                pay(&mut phases, &provider, Hooks::of(&headers), false).await
            }

            #[idem::axum::idempotent(scope = account)]
            pub(super) async fn refunds(
                account: Account,
                tx: idem::Tx<'_, $db>,
                axum::Json(order): axum::Json<NewOrder>,
            ) -> Answer {
                let _ = &mut *tx;
                new_order(account, &order)
            }

            #[idem::axum::idempotent(scope = account)]
            pub(super) async fn pool_then_503(
                account: Account,
                tx: idem::Tx<'_, $db>,
                Extension(pool): Extension<Pool<$db>>,
                headers: axum::http::HeaderMap,
                axum::Json(order): axum::Json<NewOrder>,
            ) -> Answer {
                let _ = &mut *tx;
                let mut conn = pool.acquire().await.unwrap();
                <$db as Store>::insert_order(&mut conn, account.id(), &order)
                    .await
                    .unwrap();
                if Hooks::of(&headers).fail {
                    return Answer::status(503);
                }
                new_order(account, &order)
            }

            pub(super) async fn unannotated(
                account: Account,
                Extension(pool): Extension<Pool<$db>>,
                axum::Json(order): axum::Json<NewOrder>,
            ) -> Answer {
                let mut conn = pool.acquire().await.unwrap();
                <$db as Store>::insert_order(&mut conn, account.id(), &order)
                    .await
                    .unwrap();
                new_order(account, &order)
            }

            #[idem::axum::idempotent(scope = account)]
            pub(super) async fn order_id_header(
                account: Account,
                tx: idem::Tx<'_, $db>,
                axum::Json(order): axum::Json<NewOrder>,
            ) -> Answer {
                let created = <$db as Store>::insert_order(&mut tx, account.id(), &order)
                    .await
                    .unwrap();
                new_order(account, &order).with_header("x-order-id", created.id.to_string())
            }

            pub(super) fn routes() -> axum::Router {
                use axum::routing::post;
                axum::Router::new()
                    .route("/test/payments", post(payments))
                    .route("/test/made-up-keys", post(made_up_keys))
                    .route("/test/refunds", post(refunds))
                    .route("/test/pool-then-503", post(pool_then_503))
                    .route("/test/unannotated", post(unannotated))
                    .route("/test/order-id-header", post(order_id_header))
            }
        }
    };
}

axum_twins!(axum_on_postgres, sqlx::Postgres);
axum_twins!(axum_on_sqlite, sqlx::Sqlite);

/// The example's application with the test routes, on the test's framework, as `$app`
/// in `$body`: an actix-web test service or an axum `Router`.
macro_rules! on_app {
    ($db:ty, $env:expr, $provider:expr, |$app:ident| $body:expr) => {{
        let env: &Env<$db> = $env;
        let provider: Arc<Provider> = Arc::clone($provider);
        let idem = env.idem();
        match Framework::current() {
            Framework::Actix => {
                let $app = actix_web::test::init_service(
                    actix_web::App::new()
                        .app_data(web::Data::from(provider))
                        .configure(|cfg| support::app::configure(cfg, &idem))
                        .configure(actix_routes::routes::<$db>),
                )
                .await;
                $body
            }
            Framework::Axum => {
                let routes =
                    by_database::<$db, _>(axum_on_postgres::routes, axum_on_sqlite::routes)
                        .layer(Extension(idem.pool().clone()))
                        .layer(Extension(provider))
                        .layer(Extension(idem.clone()));
                let $app = <$db as TestBackend>::axum_router(&idem).merge(routes);
                $body
            }
        }
    }};
}

/// The effect counter of the order routes: rows in `orders`.
fn orders<DB: TestBackend>(
    env: &Env<DB>,
) -> impl Fn() -> std::pin::Pin<Box<dyn Future<Output = i64>>> + 'static {
    let pool = env.pool.clone();
    move || {
        let pool = pool.clone();
        Box::pin(async move { DB::scalar(&pool, "SELECT count(*) FROM orders").await })
    }
}

/// A route that takes an order, as Alice.
fn order_endpoint<DB: TestBackend>(env: &Env<DB>, uri: &str) -> Endpoint {
    Endpoint::post(uri)
        .header("x-account-id", &ALICE.to_string())
        .body("application/json", order_json("book", 1, 1_200))
        .mismatch_body(order_json("pen", 1, 1_200))
        .effect(orders(env))
        .store(&env.pool)
}

/// A payment route, as Alice, counted by the provider's charges.
fn payment_endpoint<DB: TestBackend>(
    env: &Env<DB>,
    uri: &str,
    provider: &Arc<Provider>,
) -> Endpoint {
    let (charges, seen) = (Arc::clone(provider), Arc::clone(provider));
    Endpoint::post(uri)
        .header("x-account-id", &ALICE.to_string())
        .json(json!({ "amount_cents": 4_200, "currency": "EUR" }))
        .mismatch_json(json!({ "amount_cents": 4_300, "currency": "EUR" }))
        .effect(move || {
            let charges = Arc::clone(&charges);
            async move { charges.charges() }
        })
        .derived_keys(move || {
            let seen = Arc::clone(&seen);
            async move { seen.seen() }
        })
        .fail_request(|request| request.header("x-test-fail", "503"))
        .crash_after("payment_created", |request| {
            request.header("x-test-crash", "charge")
        })
        .store(&env.pool)
}

fn assert_ran(passed: &Passed, checks: &[&str]) {
    for check in checks {
        assert!(passed.seen().contains(check), "{check} ran: {passed}");
    }
}

fn assert_failed(failed: &Failed, check: &str, seen: &[&str]) {
    // What a user of the harness reads (`--nocapture` shows it).
    eprintln!("{failed}");
    assert_eq!(failed.check(), check, "{failed}");
    let message = failed.to_string();
    assert!(message.contains(check), "{message}");
    for part in seen {
        assert!(
            message.contains(part),
            "the message says {part:?}: {message}"
        );
    }
}

async fn the_example_orders_pass_every_check<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let provider = Arc::default();
    let endpoint = Endpoint::post("/orders")
        .header("x-account-id", &ALICE.to_string())
        .body("application/json", order_json("book", 1, 1_200))
        .mismatch_body(order_json("pen", 1, 1_200))
        .other_route("/test/refunds")
        .effect(orders(&env))
        // The example's test hook: 500 after the order is inserted.
        .fail_request(|request| request.query("fail=500"))
        .store(&env.pool);
    let passed = on_app!(DB, &env, &provider, |app| endpoint.all(&app).await).unwrap();
    assert_ran(
        &passed,
        &[
            "concurrency",
            "replay",
            "missing_key",
            "mismatch",
            "transient_failure",
            "expiry",
        ],
    );
    assert!(!passed.seen().contains("crash_resume"), "{passed}");
}

async fn a_phased_payment_passes_every_check<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let provider: Arc<Provider> = Arc::default();
    let endpoint = payment_endpoint(&env, "/test/payments", &provider);
    let passed = on_app!(DB, &env, &provider, |app| endpoint.all(&app).await).unwrap();
    assert_ran(
        &passed,
        &[
            "concurrency",
            "replay",
            "missing_key",
            "mismatch",
            "transient_failure",
            "crash_resume",
            "expiry",
        ],
    );
    assert!(!passed.seen().contains("not run"), "{passed}");
}

async fn a_provider_key_made_up_per_attempt_fails_crash_resume<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let provider: Arc<Provider> = Arc::default();
    let endpoint = payment_endpoint(&env, "/test/made-up-keys", &provider);
    let failed = on_app!(DB, &env, &provider, |app| endpoint.crash_resume(&app).await).unwrap_err();
    assert_failed(
        &failed,
        "crash_resume",
        &["effect counter +2", "derive them with Phases::derived_key"],
    );
    // The checks that do not crash cannot tell.
    on_app!(DB, &env, &provider, |app| endpoint.concurrency(&app).await).unwrap();
}

async fn an_unannotated_route_fails_concurrency_missing_key_mismatch_and_expiry<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let provider = Arc::default();
    let endpoint = order_endpoint(&env, "/test/unannotated").parallel(5);
    let failed = on_app!(DB, &env, &provider, |app| endpoint.concurrency(&app).await).unwrap_err();
    assert_failed(
        &failed,
        "concurrency",
        &["5 first execution(s)", "effect counter +5"],
    );
    let failed = on_app!(DB, &env, &provider, |app| endpoint.missing_key(&app).await).unwrap_err();
    assert_failed(
        &failed,
        "missing_key",
        &["400 with type", "201", "effect counter +1"],
    );
    let failed = on_app!(DB, &env, &provider, |app| endpoint.mismatch(&app).await).unwrap_err();
    assert_failed(
        &failed,
        "mismatch",
        &["another body: 201", "effect counter +1"],
    );
    let failed = on_app!(DB, &env, &provider, |app| endpoint.expiry(&app).await).unwrap_err();
    assert_failed(&failed, "expiry", &["no key row after a completed request"]);
}

async fn a_header_missing_from_the_replayed_ones_fails_replay<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let provider = Arc::default();
    let endpoint = order_endpoint(&env, "/test/order-id-header").replay_header("x-order-id");
    let failed = on_app!(DB, &env, &provider, |app| endpoint.replay(&app).await).unwrap_err();
    assert_failed(&failed, "replay", &["x-order-id: none instead of"]);
    // Without the claim that it is replayed, the replay is right.
    let endpoint = order_endpoint(&env, "/test/order-id-header");
    on_app!(DB, &env, &provider, |app| endpoint.replay(&app).await).unwrap();
}

support::backend_tests!(
    the_example_orders_pass_every_check,
    a_phased_payment_passes_every_check,
    a_provider_key_made_up_per_attempt_fails_crash_resume,
    an_unannotated_route_fails_concurrency_missing_key_mismatch_and_expiry,
    a_header_missing_from_the_replayed_ones_fails_replay,
);

/// On PostgreSQL only: on SQLite the pool's write waits for the write lock that the
/// request's own transaction holds, so the mistake cannot commit there.
async fn a_pool_write_then_503_fails_transient_failure() {
    let env = Env::<sqlx::Postgres>::open().await;
    let provider = Arc::default();
    let endpoint = order_endpoint(&env, "/test/pool-then-503")
        .fail_request(|request| request.header("x-test-fail", "1"));
    let failed = on_app!(sqlx::Postgres, &env, &provider, |app| endpoint
        .transient_failure(&app)
        .await)
    .unwrap_err();
    assert_failed(
        &failed,
        "transient_failure",
        &[
            "failure: 503",
            "no key row left",
            "effect counter +1 after the failed request",
        ],
    );
}

support::both_frameworks!(
    #[actix_web::test]
    a_pool_write_then_503_fails_transient_failure
);
