#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
#[actix_web::get("/accounts/{account}/orders")]
async fn list_orders(account: actix_web::web::ReqData<i64>) -> &'static str {
    "orders"
}

fn main() {}
