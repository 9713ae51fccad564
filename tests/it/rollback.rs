//! A 5xx, a panic or a database error in the handler rolls back everything: the
//! handler's rows and the key. The same key can then be retried and runs exactly once.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix_web::http::header::LOCATION;
use actix_web::{HttpResponse, post, web};
use support::app::{Account, AppError};
use support::{ALICE, Env, TestBackend, order_json, post, post_order};

async fn a_500_after_the_insert_rolls_back_the_order_and_the_key<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let body = order_json("tea", 1, 100);

    for _ in 0..2 {
        // Nothing was stored, so the same request runs (and fails) again: not a replay.
        let failed = app.call(post("/orders?fail=500", ALICE, "k", &body)).await;
        failed.assert_app_problem(500, "simulated-failure");
        assert!(!failed.replayed());
        assert_eq!(env.orders().await, 0, "the insert was rolled back");
        assert_eq!(env.keys().await, 0, "the key was not stored");
    }

    // The key is unused: a request without the hook runs (a stored key would give 422).
    let ok = app.call(post_order(ALICE, "k", &body)).await;
    ok.assert_created();
    assert_eq!(env.orders().await, 1);
}

async fn a_panic_after_the_insert_rolls_back_the_order_and_the_key<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let body = order_json("tea", 1, 100);

    let failed = app
        .call(post("/orders?fail=panic", ALICE, "k", &body))
        .await;
    failed.assert_idem_problem(500, "handler-panicked");
    assert_eq!(env.orders().await, 0);
    assert_eq!(env.keys().await, 0);

    let ok = app.call(post_order(ALICE, "k", &body)).await;
    ok.assert_created();
    assert_eq!(env.orders().await, 1);
}

/// How the first attempt at `/test/flaky` fails; later attempts succeed.
#[derive(Debug, Clone, Copy)]
enum FirstAttempt {
    Returns503,
    Panics,
    DatabaseError,
}

#[derive(Debug)]
struct Flaky {
    first: FirstAttempt,
    attempts: AtomicUsize,
}

/// Inserts an order on every attempt; the first attempt then fails as configured.
#[post("/test/flaky")]
#[idem::idempotent(scope = account, retention = "24h")]
async fn flaky(
    account: Account,
    flaky: web::Data<Flaky>,
    tx: idem::Tx<'_, sqlx::Postgres>,
) -> Result<HttpResponse, AppError> {
    let attempt = flaky.attempts.fetch_add(1, Ordering::SeqCst) + 1;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO orders (account_id, item, quantity, amount_cents) \
         VALUES ($1, 'flaky', 1, 0) RETURNING id",
    )
    .bind(account.id())
    .fetch_one(&mut *tx)
    .await?;
    if attempt == 1 {
        match flaky.first {
            FirstAttempt::Returns503 => {
                return Ok(HttpResponse::ServiceUnavailable().body("try again"));
            }
            FirstAttempt::Panics => panic!("first attempt panics"),
            FirstAttempt::DatabaseError => {
                sqlx::query("SELECT 1 / 0").execute(&mut *tx).await?;
            }
        }
    }
    Ok(HttpResponse::Created()
        .insert_header((LOCATION, format!("/orders/{id}")))
        .body(format!("order {id} on attempt {attempt}")))
}

/// The same handler on axum.
#[idem::axum::idempotent(scope = account, retention = "24h")]
async fn flaky_on_axum(
    account: Account,
    axum::Extension(state): axum::Extension<Arc<Flaky>>,
    tx: idem::Tx<'_, sqlx::Postgres>,
) -> Result<axum::response::Response, AppError> {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;

    let attempt = state.attempts.fetch_add(1, Ordering::SeqCst) + 1;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO orders (account_id, item, quantity, amount_cents) \
         VALUES ($1, 'flaky', 1, 0) RETURNING id",
    )
    .bind(account.id())
    .fetch_one(&mut *tx)
    .await?;
    if attempt == 1 {
        match state.first {
            FirstAttempt::Returns503 => {
                return Ok((StatusCode::SERVICE_UNAVAILABLE, "try again").into_response());
            }
            FirstAttempt::Panics => panic!("first attempt panics"),
            FirstAttempt::DatabaseError => {
                sqlx::query("SELECT 1 / 0").execute(&mut *tx).await?;
            }
        }
    }
    let location = [(axum::http::header::LOCATION, format!("/orders/{id}"))];
    let body = format!("order {id} on attempt {attempt}");
    Ok((StatusCode::CREATED, location, body).into_response())
}

/// The first attempt fails as `first` says; a retry with the same key and the very same
/// request then runs once and is stored.
async fn retry_after(first: FirstAttempt) {
    let env = Env::new().await;
    let state = web::Data::new(Flaky {
        first,
        attempts: AtomicUsize::new(0),
    });
    let shared = state.clone().into_inner();
    let app = support::service_with_twin(
        &env.idem(),
        |cfg| {
            cfg.app_data(state.clone()).service(flaky);
        },
        || {
            axum::Router::new()
                .route("/test/flaky", axum::routing::post(flaky_on_axum))
                .layer(axum::Extension(shared))
        },
    )
    .await;
    let request = || post("/test/flaky", ALICE, "retry-me", "{}");

    let failed = app.call(request()).await;
    match first {
        FirstAttempt::Returns503 => {
            assert_eq!(failed.status, 503);
            assert_eq!(failed.body, "try again");
        }
        FirstAttempt::Panics => {
            failed.assert_idem_problem(500, "handler-panicked");
        }
        FirstAttempt::DatabaseError => {
            failed.assert_app_problem(500, "internal-error");
        }
    }
    assert!(!failed.replayed());
    assert_eq!(
        env.orders().await,
        0,
        "{first:?}: the first attempt's insert is rolled back"
    );
    assert_eq!(env.keys().await, 0, "{first:?}: the key is not stored");

    let retried = app.call(request()).await;
    assert_eq!(retried.status, 201, "{first:?}: the retry runs");
    assert!(!retried.replayed());
    assert!(
        retried.body.ends_with(b"on attempt 2"),
        "{:?}",
        retried.body
    );
    assert_eq!(env.orders().await, 1, "{first:?}: exactly one order");

    let replayed = app.call(request()).await;
    replayed.assert_replay_of(&retried);
    assert_eq!(
        state.attempts.load(Ordering::SeqCst),
        2,
        "the replay did not run the handler"
    );
    assert_eq!(env.orders().await, 1);
    assert_eq!(
        env.key_rows().await,
        [(
            ALICE.to_string(),
            "retry-me".to_owned(),
            "completed".to_owned(),
            Some(201)
        )]
    );
}

async fn the_same_request_is_retried_after_a_5xx() {
    retry_after(FirstAttempt::Returns503).await;
}

async fn the_same_request_is_retried_after_a_panic() {
    retry_after(FirstAttempt::Panics).await;
}

async fn the_same_request_is_retried_after_a_database_error() {
    retry_after(FirstAttempt::DatabaseError).await;
}

support::backend_tests!(
    a_500_after_the_insert_rolls_back_the_order_and_the_key,
    a_panic_after_the_insert_rolls_back_the_order_and_the_key,
);

support::both_frameworks!(
    #[actix_web::test]
    the_same_request_is_retried_after_a_5xx,
    #[actix_web::test]
    the_same_request_is_retried_after_a_panic,
    #[actix_web::test]
    the_same_request_is_retried_after_a_database_error,
);
