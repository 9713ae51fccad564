#[actix_web::post("/notifications")]
#[idem::idempotent(scope = account, store = redis, lease = "30s")]
async fn send_notification(
    account: actix_web::web::ReqData<i64>,
    phases: idem::Phases<sqlx::Postgres>,
) -> &'static str {
    let _ = (account, phases);
    "sent"
}

fn main() {}
