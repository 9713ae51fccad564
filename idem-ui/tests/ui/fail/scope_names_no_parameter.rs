#[actix_web::post("/accounts/{account}/orders")]
#[idem::idempotent(scope = acount)]
async fn create_order(account: actix_web::web::ReqData<i64>, tx: idem::Tx<'_, sqlx::Postgres>) -> &'static str {
    "created"
}

fn main() {}
