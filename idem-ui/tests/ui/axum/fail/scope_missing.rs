#[idem::axum::idempotent(backend = sqlx::Postgres, retention = "24h")]
async fn create_order(account: axum::Extension<i64>, body: String) -> String {
    format!("{} {body}", account.0)
}

fn main() {}
