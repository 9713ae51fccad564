#[idem::axum::idempotent(scope = account, store = redis, lease = "30s")]
async fn send_notification(
    account: axum::Extension<i64>,
    tx: idem::Tx<'_, sqlx::Postgres>,
) -> &'static str {
    let _ = (account, tx);
    "sent"
}

fn main() {}
