//! A key reused for a different request gets 422 `idempotency-key-reused`, saying whether
//! the method/path or the body differs; a body that differs only in JSON key order or
//! whitespace is the same request and replays.

use crate::support;

use actix_web::{HttpResponse, web};
use support::app::Account;
use support::{
    ALICE, Env, Reply, TestApp, TestBackend, TestRequest, by_database, order_json, post, post_order,
};

/// `/orders` with PUT, so the same path can be reached with another method.
#[idem::idempotent(scope = account, retention = "24h")]
async fn put_orders<DB: TestBackend>(account: Account, tx: idem::Tx<'_, DB>) -> HttpResponse {
    let _ = (account, &mut *tx);
    HttpResponse::Ok().body("put")
}

/// Another keyed POST path.
#[idem::idempotent(scope = account, retention = "24h")]
async fn other_path<DB: TestBackend>(account: Account, tx: idem::Tx<'_, DB>) -> HttpResponse {
    let _ = (account, &mut *tx);
    HttpResponse::Ok().body("other")
}

/// The same two handlers on axum, once per database.
macro_rules! axum_twins {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::support::app::Account;

            #[idem::axum::idempotent(scope = account, retention = "24h")]
            pub(super) async fn put_orders(
                account: Account,
                tx: idem::Tx<'_, $db>,
            ) -> &'static str {
                let _ = (account, &mut *tx);
                "put"
            }

            #[idem::axum::idempotent(scope = account, retention = "24h")]
            pub(super) async fn other_path(
                account: Account,
                tx: idem::Tx<'_, $db>,
            ) -> &'static str {
                let _ = (account, &mut *tx);
                "other"
            }
        }
    };
}

axum_twins!(on_postgres, sqlx::Postgres);
axum_twins!(on_sqlite, sqlx::Sqlite);

fn axum_routes<DB: TestBackend>() -> axum::Router {
    use axum::routing::{post, put};
    by_database::<DB, _>(
        || {
            axum::Router::new()
                .route("/orders", put(on_postgres::put_orders))
                .route("/test/other", post(on_postgres::other_path))
        },
        || {
            axum::Router::new()
                .route("/orders", put(on_sqlite::put_orders))
                .route("/test/other", post(on_sqlite::other_path))
        },
    )
}

async fn app_with_first_order<DB: TestBackend>(env: &Env<DB>, key: &str) -> (TestApp, Reply) {
    let app = support::service_before_twin(
        &env.idem(),
        |cfg| {
            cfg.route("/orders", web::put().to(put_orders::<DB>))
                .route("/test/other", web::post().to(other_path::<DB>));
        },
        axum_routes::<DB>,
    )
    .await;
    let first = app
        .call(post_order(ALICE, key, &order_json("tea", 2, 500)))
        .await;
    first.assert_created();
    (app, first)
}

fn assert_reused(reply: &Reply, mismatch: &str) {
    let problem = reply.assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(
        problem["mismatch"], mismatch,
        "mismatch member; body: {problem}"
    );
    assert!(!reply.replayed());
}

async fn a_different_body_is_a_body_mismatch<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let (app, first) = app_with_first_order(&env, "k").await;

    for body in [
        order_json("tea", 3, 500),
        order_json("coffee", 2, 500),
        order_json("tea", 2, 501),
        // An extra member is a different request too.
        r#"{"item":"tea","quantity":2,"amount_cents":500,"note":"x"}"#.to_owned(),
    ] {
        assert_reused(&app.call(post_order(ALICE, "k", &body)).await, "body");
    }

    assert_eq!(env.orders().await, 1);
    // The key still belongs to the first request.
    app.call(post_order(ALICE, "k", &order_json("tea", 2, 500)))
        .await
        .assert_replay_of(&first);
}

async fn a_different_path_query_or_method_is_a_method_or_path_mismatch<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let (app, first) = app_with_first_order(&env, "k").await;
    let body = order_json("tea", 2, 500);

    // Another query string, even one that changes nothing in the handler.
    assert_reused(
        &app.call(post("/orders?delay_ms=0", ALICE, "k", &body))
            .await,
        "method_or_path",
    );
    // Another path.
    assert_reused(
        &app.call(post("/test/other", ALICE, "k", &body)).await,
        "method_or_path",
    );
    // Another method on the same path.
    let put = TestRequest::put()
        .uri("/orders")
        .insert_header(("x-account-id", ALICE.to_string()))
        .insert_header(("idempotency-key", "k"))
        .insert_header(("content-type", "application/json"))
        .set_payload(body.clone());
    assert_reused(&app.call(put).await, "method_or_path");

    assert_eq!(env.orders().await, 1);
    app.call(post_order(ALICE, "k", &body))
        .await
        .assert_replay_of(&first);
}

async fn reordered_keys_and_whitespace_replay<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let (app, first) = app_with_first_order(&env, "k").await;

    for body in [
        r#"{"amount_cents":500,"quantity":2,"item":"tea"}"#,
        "{\n  \"quantity\" : 2,\n  \"item\" : \"tea\",\n  \"amount_cents\" : 500\n}\n",
        "  {\"item\":\"tea\",\t\"amount_cents\":500,\"quantity\":2}  ",
    ] {
        let again = app.call(post_order(ALICE, "k", body)).await;
        again.assert_replay_of(&first);
    }
    assert_eq!(env.orders().await, 1);
}

support::backend_tests!(
    a_different_body_is_a_body_mismatch,
    a_different_path_query_or_method_is_a_method_or_path_mismatch,
    reordered_keys_and_whitespace_replay,
);
