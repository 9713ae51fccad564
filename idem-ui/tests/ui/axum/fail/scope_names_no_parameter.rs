#[idem::axum::idempotent(scope = acount)]
async fn create_order(
    account: axum::Extension<i64>,
    tx: idem::Tx<'_, sqlx::Postgres>,
    body: String,
) -> String {
    let _ = &mut *tx;
    format!("{} {body}", account.0)
}

fn main() {}
