#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
#[actix_web::post("/accounts/{account}/orders")]
fn create_order(account: actix_web::web::ReqData<i64>) -> &'static str {
    "created"
}

fn main() {}
