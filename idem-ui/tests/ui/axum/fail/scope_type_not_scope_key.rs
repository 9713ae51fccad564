// The scope parameter's type must say which caller it is (`ScopeKey`); a plain
// extractor of some other data does not.
#[idem::axum::idempotent(scope = account, backend = sqlx::Postgres)]
async fn create_order(account: axum::Extension<Vec<u8>>, body: String) -> String {
    format!("{:?} {body}", account.0)
}

fn main() {}
