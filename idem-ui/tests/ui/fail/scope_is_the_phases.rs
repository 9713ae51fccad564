#[actix_web::post("/payments")]
#[idem::idempotent(scope = phases, lease = "30s")]
async fn create_payment(account: actix_web::web::ReqData<i64>, phases: idem::Phases<sqlx::Postgres>) -> &'static str {
    let _ = (account, phases);
    "created"
}

fn main() {}
