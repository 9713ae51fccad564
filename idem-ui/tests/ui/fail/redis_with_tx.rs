#[actix_web::post("/notifications")]
#[idem::idempotent(scope = account, store = redis, lease = "30s")]
async fn send_notification(
    account: actix_web::web::ReqData<i64>,
    tx: idem::Tx<'_, sqlx::Postgres>,
) -> &'static str {
    let _ = (account, tx);
    "sent"
}

fn main() {}
