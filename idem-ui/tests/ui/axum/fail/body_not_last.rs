#[idem::axum::idempotent(scope = account)]
async fn create_order(
    body: axum::Json<serde_json::Value>,
    account: axum::Extension<i64>,
    tx: idem::Tx<'_, sqlx::Postgres>,
) -> String {
    let _ = (body, &mut *tx);
    account.0.to_string()
}

fn main() {}
