#[actix_web::post("/accounts/{account}/orders")]
#[idem::idempotent(scope = account, backend = sqlx::Postgres, retention = "24h", retention = "48h")]
async fn create_order(account: actix_web::web::ReqData<i64>) -> &'static str {
    "created"
}

fn main() {}
