#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
#[actix_web::route("/accounts/{account}/orders", method = "HEAD")]
async fn list_orders(account: actix_web::web::ReqData<i64>) -> &'static str {
    "orders"
}

fn main() {}
