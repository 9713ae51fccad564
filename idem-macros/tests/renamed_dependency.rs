//! `crate = ..` with a renamed dependency: this crate depends on idem as `keys`, so
//! `::idem` names nothing here and the handler compiles only because the generated code
//! follows `crate = keys`. It then runs once and replays, on a real SQLite file. An
//! exemption follows `crate = keys` the same way.

use actix_web::http::StatusCode;
use actix_web::{App, HttpResponse, post, test, web};

#[post("/accounts/{account}/orders")]
#[keys::idempotent(scope = account, crate = keys)]
async fn create_order(
    account: keys::UnverifiedScope<web::Path<i64>>,
    tx: keys::Tx<'_, sqlx::Sqlite>,
    item: String,
) -> actix_web::Result<HttpResponse> {
    let id: i64 =
        sqlx::query_scalar("INSERT INTO orders (account_id, item) VALUES ($1, $2) RETURNING id")
            .bind(**account)
            .bind(&item)
            .fetch_one(&mut *tx)
            .await
            .map_err(actix_web::error::ErrorInternalServerError)?;
    Ok(HttpResponse::Created().body(format!("order {id}: {item}")))
}

/// The exemption reaches the registry by `crate = keys` too.
#[keys::exempt("PUT by client-chosen id", crate = keys)]
#[actix_web::put("/carts/{id}")]
async fn put_cart(id: web::Path<i64>) -> HttpResponse {
    HttpResponse::Ok().body(id.into_inner().to_string())
}

#[actix_web::test]
async fn an_exemption_reached_through_a_renamed_dependency_is_registered() {
    let _ = put_cart;
    let exempt: Vec<_> = keys::registry::exemptions()
        .into_iter()
        .map(|exemption| (exemption.handler(), exemption.route()))
        .collect();
    assert_eq!(exempt, [("put_cart", Some(("PUT", "/carts/{id}")))]);
}

#[actix_web::test]
async fn a_handler_reached_through_a_renamed_dependency_runs_once_and_replays() {
    let db = idem_testkit::TestSqlite::new();
    let pool = db.pool(2).await;
    keys::migrate(&pool).await.expect("idem's tables");
    sqlx::query(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, account_id INTEGER NOT NULL, \
         item TEXT NOT NULL)",
    )
    .execute(&pool)
    .await
    .expect("the orders table");
    let app = test::init_service(
        App::new()
            .app_data(keys::Idem::new(pool.clone()))
            .service(create_order),
    )
    .await;
    let request = || {
        test::TestRequest::post()
            .uri("/accounts/7/orders")
            .insert_header(("Idempotency-Key", "first-order"))
            .set_payload("tea")
            .to_request()
    };

    let first = test::call_service(&app, request()).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first_body = test::read_body(first).await;
    assert_eq!(first_body, "order 1: tea");

    let again = test::call_service(&app, request()).await;
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(
        again
            .headers()
            .get("idempotent-replayed")
            .map(|value| value.as_bytes()),
        Some(&b"true"[..]),
        "the retry is answered from the stored response"
    );
    assert_eq!(test::read_body(again).await, first_body);

    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE account_id = 7")
        .fetch_one(&pool)
        .await
        .expect("count the orders");
    assert_eq!(orders, 1, "the handler ran once");
}
