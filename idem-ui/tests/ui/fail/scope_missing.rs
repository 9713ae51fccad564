#[actix_web::post("/orders")]
#[idem::idempotent(backend = sqlx::Postgres, retention = "24h")]
async fn create_order(account: actix_web::web::ReqData<i64>) -> &'static str {
    "created"
}

fn main() {}
