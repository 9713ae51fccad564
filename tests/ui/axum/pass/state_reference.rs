// `state = AppState<Shop, &'static str>`: a reference among the state type's arguments
// is written as it is, as any other type argument.
use axum::extract::State;
use axum::routing::post;
use axum::{Extension, Router};

#[derive(Clone)]
struct AppState<S, C> {
    shop: S,
    currency: C,
}

#[derive(Clone)]
struct Shop(&'static str);

#[idem::axum::idempotent(scope = account, state = AppState<Shop, &'static str>, backend = sqlx::Postgres)]
async fn touch(
    State(app): State<AppState<Shop, &'static str>>,
    account: Extension<i64>,
) -> &'static str {
    let _ = (account.0, app.shop.0);
    app.currency
}

#[idem::axum::idempotent(scope = account, state = AppState::<Shop, &'static str>, backend = sqlx::Postgres)]
async fn name(State(app): State<AppState<Shop, &'static str>>, account: Extension<i64>) -> &'static str {
    let _ = (account.0, app.currency);
    app.shop.0
}

// Without `state = ..` the handler is generic over the router's state, as before.
#[idem::axum::idempotent(scope = account, backend = sqlx::Postgres)]
async fn plain(State(app): State<AppState<Shop, &'static str>>, account: Extension<i64>) -> &'static str {
    let _ = account.0;
    app.currency
}

fn main() {
    let state = AppState {
        shop: Shop("corner"),
        currency: "EUR",
    };
    let _: Router = Router::new()
        .route("/touch", post(touch))
        .route("/name", post(name))
        .route("/plain", post(plain))
        .with_state(state);
}
