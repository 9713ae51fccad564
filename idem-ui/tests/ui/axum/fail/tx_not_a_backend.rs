// The type parameter of `idem::Tx` names the database, and `String` is none: one error,
// at `String`, and nothing about the generated handler.
#[idem::axum::idempotent(scope = account)]
async fn create_order(account: axum::Extension<i64>, tx: idem::Tx<'_, String>, body: String) -> String {
    let _ = tx;
    format!("{} {body}", account.0)
}

fn main() {}
