// `#[idem::exempt]` goes on a handler function, and not on an idempotent one (in either
// order).
use actix_web::{HttpResponse, post, web};

#[idem::exempt("PUT by id")]
struct Cart;

#[idem::exempt("the caller says so")]
#[post("/orders")]
#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
async fn create_order(account: idem::UnverifiedScope<web::Path<i64>>) -> HttpResponse {
    let _ = account;
    HttpResponse::Created().finish()
}

#[post("/payments")]
#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
#[idem::exempt("the caller says so")]
async fn create_payment(account: idem::UnverifiedScope<web::Path<i64>>) -> HttpResponse {
    let _ = account;
    HttpResponse::Created().finish()
}

fn main() {
    let _ = (Cart, create_order, create_payment);
}
