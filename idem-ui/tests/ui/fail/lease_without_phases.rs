#[actix_web::post("/accounts/{account}/orders")]
#[idem::idempotent(scope = account, lease = "30s")]
async fn create_order(account: actix_web::web::ReqData<i64>, tx: idem::Tx<'_, sqlx::Postgres>) -> &'static str {
    let _ = (account, tx);
    "created"
}

fn main() {}
