// A scope parameter bound with `mut` (tests/macro_model.rs checks the registered name is
// `account`), and a route attribute with one unsafe method, or several.
use actix_web::{App, HttpResponse, route, web};

#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
#[route("/orders", method = "POST")]
async fn create_order(mut account: web::ReqData<i64>) -> HttpResponse {
    let _ = &mut account;
    HttpResponse::Created().finish()
}

#[idem::idempotent(scope = account)]
#[route("/orders/{id}", method = "PUT", method = "PATCH")]
async fn update_order(
    account: web::ReqData<i64>,
    tx: idem::Tx<'_, sqlx::Postgres>,
) -> HttpResponse {
    let _ = (account, &mut *tx);
    HttpResponse::NoContent().finish()
}

fn main() {
    let _ = App::new().service(create_order).service(update_order);
}
