// The last parameter is no extractor, with `state = ..`: one error, at its type.
#[derive(Clone)]
struct AppState;

struct Order(String);

#[idem::axum::idempotent(scope = account, state = AppState, backend = sqlx::Postgres)]
async fn create_order(account: axum::Extension<i64>, order: Order) -> String {
    format!("{} {}", account.0, order.0)
}

fn main() {
    let _: axum::Router = axum::Router::new()
        .route("/orders", axum::routing::post(create_order))
        .with_state(AppState);
}
