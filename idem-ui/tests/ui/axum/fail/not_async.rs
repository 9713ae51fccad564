// axum handlers are async too: the error is at the missing `async`, not at the router.
#[idem::axum::idempotent(scope = account, backend = sqlx::Postgres)]
fn create_order(account: axum::Extension<i64>, body: String) -> String {
    format!("{} {body}", account.0)
}

fn main() {}
