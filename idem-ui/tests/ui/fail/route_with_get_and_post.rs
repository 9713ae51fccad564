// One handler for GET and POST would ask the GET for a key too: the error points at the
// safe method, which needs a handler of its own.
#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
#[actix_web::route("/accounts/{account}/orders", method = "GET", method = "POST")]
async fn orders(account: actix_web::web::ReqData<i64>) -> &'static str {
    "orders"
}

fn main() {}
