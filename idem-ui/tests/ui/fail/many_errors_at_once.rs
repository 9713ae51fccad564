// Independent mistakes are all reported in one build.
#[idem::idempotent(scope = acount, backend = sqlx::Postgres, retention = "1h", lease = "30s")]
#[actix_web::post("/accounts/{account}/orders")]
fn create_order(account: actix_web::web::ReqData<i64>) -> &'static str {
    "created"
}

fn main() {}
