// With the route attribute written above `#[idempotent]` (the README's order) it expands
// first, and `#[idempotent]` reads the methods back from this file: each safe one is
// refused as in the other order, at the `#[idempotent]` the user must remove.
use actix_web::{HttpResponse, head, route, web};

#[head("/accounts/{account}/orders")]
#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
async fn count_orders(account: web::ReqData<i64>) -> HttpResponse {
    let _ = account;
    HttpResponse::Ok().finish()
}

#[route("/accounts/{account}/orders", method = "HEAD")]
#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
async fn count_orders_by_route(account: web::ReqData<i64>) -> HttpResponse {
    let _ = account;
    HttpResponse::Ok().finish()
}

#[route("/accounts/{account}/orders", method = "GET", method = "POST")]
#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
async fn list_or_create(account: web::ReqData<i64>) -> HttpResponse {
    let _ = account;
    HttpResponse::Ok().finish()
}

fn main() {}
