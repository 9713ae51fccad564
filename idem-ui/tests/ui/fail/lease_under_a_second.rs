#[actix_web::post("/accounts/{account}/payments")]
#[idem::idempotent(scope = account, lease = "500ms")]
async fn create_payment(account: actix_web::web::ReqData<i64>, phases: idem::Phases<sqlx::Postgres>) -> &'static str {
    let _ = (account, phases);
    "created"
}

fn main() {}
