// A transaction on SQLite and phases on PostgreSQL in an axum handler: a phased handler
// has no single transaction, so the `Tx` is the parameter to remove, whatever its database.
#[idem::axum::idempotent(scope = account, lease = "30s")]
async fn create_payment(
    account: axum::Extension<i64>,
    tx: idem::Tx<'_, sqlx::Sqlite>,
    phases: idem::Phases<sqlx::Postgres>,
    body: String,
) -> String {
    let _ = (tx, phases);
    format!("{} {body}", account.0)
}

fn main() {}
