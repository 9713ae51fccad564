struct Handlers;

impl Handlers {
    #[idem::axum::idempotent(scope = account, backend = sqlx::Postgres)]
    async fn create_order(&self, account: axum::Extension<i64>) -> String {
        account.0.to_string()
    }
}

fn main() {}
