#[idem::axum::idempotent(scope = account, backend = sqlx::Postgres)]
async fn create_order<T: serde::de::DeserializeOwned>(
    account: axum::Extension<i64>,
    body: axum::Json<T>,
) -> String {
    let _ = body;
    account.0.to_string()
}

fn main() {}
