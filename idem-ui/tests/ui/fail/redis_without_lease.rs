#[actix_web::post("/notifications")]
#[idem::idempotent(scope = account, store = redis)]
async fn send_notification(
    account: actix_web::web::ReqData<i64>,
    steps: idem::redis::Steps,
) -> &'static str {
    let _ = (account, steps);
    "sent"
}

fn main() {}
