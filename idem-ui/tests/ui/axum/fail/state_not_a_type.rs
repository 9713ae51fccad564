// `state` takes the router's state type, not a string naming it.
use axum::Extension;

#[idem::axum::idempotent(scope = account, state = "AppState", backend = sqlx::Postgres)]
async fn touch(account: Extension<i64>) -> &'static str {
    let _ = account.0;
    "ok"
}

fn main() {}
