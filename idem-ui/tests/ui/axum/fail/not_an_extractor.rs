// A parameter that is no extractor: axum's `Handler` is not implemented, and the compiler
// says so where the handler is routed.
struct Account(i64);

impl idem::ScopeKey for Account {
    fn scope_key(&self) -> std::borrow::Cow<'_, str> {
        self.0.to_string().into()
    }
}

#[idem::axum::idempotent(scope = account, backend = sqlx::Postgres)]
async fn create_order(account: Account, body: String) -> String {
    format!("{} {body}", account.0)
}

fn main() {
    let _: axum::Router = axum::Router::new().route("/orders", axum::routing::post(create_order));
}
