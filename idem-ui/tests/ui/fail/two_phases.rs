#[actix_web::post("/accounts/{account}/payments")]
#[idem::idempotent(scope = account, lease = "30s")]
async fn create_payment(
    account: actix_web::web::ReqData<i64>,
    phases: idem::Phases<sqlx::Postgres>,
    more: idem::Phases<sqlx::Postgres>,
) -> &'static str {
    let _ = (account, phases, more);
    "created"
}

fn main() {}
