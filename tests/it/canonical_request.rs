//! Two requests that every extractor reads the same are the same request: query
//! parameters and form fields in another order replay; and two requests the extractors
//! read differently are not: integers beyond 64 bits are compared exactly.

use crate::support;

use std::collections::BTreeMap;

use actix_web::{HttpResponse, web};
use serde::Deserialize;
use support::TestRequest;
use support::app::{Account, NewOrder, Store};
use support::{ALICE, Env, TestBackend, by_database, post};

/// Inserts an order for `account` in the handler's transaction.
async fn record<DB: Store>(tx: &mut idem::Tx<'_, DB>, account: Account) {
    let order: NewOrder =
        serde_json::from_str(r#"{"item":"test","quantity":1,"amount_cents":0}"#).unwrap();
    DB::insert_order(tx, account.id(), &order)
        .await
        .expect("insert");
}

#[derive(Deserialize)]
struct Payout {
    amount: u128,
}

#[idem::idempotent(scope = account, retention = "24h")]
async fn payout<DB: Store>(
    account: Account,
    body: web::Json<Payout>,
    tx: idem::Tx<'_, DB>,
) -> HttpResponse {
    record(&mut tx, account).await;
    HttpResponse::Created().body(body.amount.to_string())
}

#[idem::idempotent(scope = account, retention = "24h")]
async fn query<DB: Store>(
    account: Account,
    params: web::Query<BTreeMap<String, String>>,
    tx: idem::Tx<'_, DB>,
) -> HttpResponse {
    record(&mut tx, account).await;
    HttpResponse::Created().json(&params.0)
}

#[idem::idempotent(scope = account, retention = "24h")]
async fn form<DB: Store>(
    account: Account,
    fields: web::Form<BTreeMap<String, String>>,
    tx: idem::Tx<'_, DB>,
) -> HttpResponse {
    record(&mut tx, account).await;
    HttpResponse::Created().json(&fields.0)
}

/// `payout`, `query` and `form` on axum, once per database.
macro_rules! axum_twins {
    ($module:ident, $db:ty) => {
        mod $module {
            use std::collections::BTreeMap;

            use axum::extract::{Form, Json, Query};
            use axum::http::StatusCode;

            use super::{Account, Payout, record};

            #[idem::axum::idempotent(scope = account, retention = "24h")]
            pub(super) async fn payout(
                account: Account,
                tx: idem::Tx<'_, $db>,
                Json(body): Json<Payout>,
            ) -> (StatusCode, String) {
                record(&mut tx, account).await;
                (StatusCode::CREATED, body.amount.to_string())
            }

            #[idem::axum::idempotent(scope = account, retention = "24h")]
            pub(super) async fn query(
                account: Account,
                Query(params): Query<BTreeMap<String, String>>,
                tx: idem::Tx<'_, $db>,
            ) -> (StatusCode, Json<BTreeMap<String, String>>) {
                record(&mut tx, account).await;
                (StatusCode::CREATED, Json(params))
            }

            #[idem::axum::idempotent(scope = account, retention = "24h")]
            pub(super) async fn form(
                account: Account,
                tx: idem::Tx<'_, $db>,
                Form(fields): Form<BTreeMap<String, String>>,
            ) -> (StatusCode, Json<BTreeMap<String, String>>) {
                record(&mut tx, account).await;
                (StatusCode::CREATED, Json(fields))
            }
        }
    };
}

axum_twins!(on_postgres, sqlx::Postgres);
axum_twins!(on_sqlite, sqlx::Sqlite);

async fn app<DB: TestBackend>(env: &Env<DB>) -> support::TestApp {
    support::service_with_twin(
        &env.idem(),
        |cfg| {
            cfg.route("/test/payout", web::post().to(payout::<DB>))
                .route("/test/query", web::post().to(query::<DB>))
                .route("/test/form", web::post().to(form::<DB>));
        },
        || {
            use axum::routing::post;
            by_database::<DB, _>(
                || {
                    axum::Router::new()
                        .route("/test/payout", post(on_postgres::payout))
                        .route("/test/query", post(on_postgres::query))
                        .route("/test/form", post(on_postgres::form))
                },
                || {
                    axum::Router::new()
                        .route("/test/payout", post(on_sqlite::payout))
                        .route("/test/query", post(on_sqlite::query))
                        .route("/test/form", post(on_sqlite::form))
                },
            )
        },
    )
    .await
}

async fn an_amount_beyond_64_bits_changed_by_one_is_a_mismatch<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = app(&env).await;
    let first = app
        .call(post(
            "/test/payout",
            ALICE,
            "payout",
            r#"{"amount":18446744073709551616}"#,
        ))
        .await;
    assert_eq!(first.status, 201);
    assert_eq!(&first.body[..], b"18446744073709551616");
    let problem = app
        .call(post(
            "/test/payout",
            ALICE,
            "payout",
            r#"{"amount":18446744073709551617}"#,
        ))
        .await
        .assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(problem["mismatch"], "body");
    // The same amount spelled another way is the same request.
    let again = app
        .call(post(
            "/test/payout",
            ALICE,
            "payout",
            r#"{ "amount": 18446744073709551616 }"#,
        ))
        .await;
    again.assert_replay_of(&first);
    assert_eq!(env.orders().await, 1);
}

async fn query_parameters_in_another_order_replay<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = app(&env).await;
    let first = app
        .call(post("/test/query?a=1&b=x+y", ALICE, "query", ""))
        .await;
    assert_eq!(first.status, 201, "{:?}", first.body);
    for uri in ["/test/query?b=x+y&a=1", "/test/query?b=x%20y&a=%31"] {
        app.call(post(uri, ALICE, "query", ""))
            .await
            .assert_replay_of(&first);
    }
    let problem = app
        .call(post("/test/query?a=2&b=x+y", ALICE, "query", ""))
        .await
        .assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(problem["mismatch"], "method_or_path");
    assert_eq!(env.orders().await, 1);
}

async fn form_fields_in_another_order_replay<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = app(&env).await;
    let send = |body: &str| {
        TestRequest::post()
            .uri("/test/form")
            .insert_header(("x-account-id", ALICE.to_string()))
            .insert_header(("idempotency-key", "form"))
            .insert_header(("content-type", "application/x-www-form-urlencoded"))
            .set_payload(body.to_owned())
    };
    let first = app.call(send("item=green+tea&quantity=2")).await;
    assert_eq!(first.status, 201, "{:?}", first.body);
    app.call(send("quantity=2&item=green%20tea"))
        .await
        .assert_replay_of(&first);
    let problem = app
        .call(send("quantity=3&item=green+tea"))
        .await
        .assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(problem["mismatch"], "body");
    assert_eq!(env.orders().await, 1);
}

support::backend_tests!(
    an_amount_beyond_64_bits_changed_by_one_is_a_mismatch,
    query_parameters_in_another_order_replay,
    form_fields_in_another_order_replay,
);
