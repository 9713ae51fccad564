// A retention whose expiry time the databases' timestamps cannot hold.
#[actix_web::post("/accounts/{account}/orders")]
#[idem::idempotent(scope = account, backend = sqlx::Postgres, retention = "300000000y")]
async fn create_order(account: actix_web::web::ReqData<i64>) -> &'static str {
    "created"
}

fn main() {}
