#[idem::axum::idempotent(scope = account, backend = sqlx::Postgres)]
#[actix_web::post("/orders")]
async fn create_order(account: axum::Extension<i64>, body: String) -> String {
    format!("{} {body}", account.0)
}

fn main() {}
