// `state = AppState<Shop, Currency>`: a generic router state is written as the type it
// is, commas and all; the turbofish spelling `AppState::<Shop, Currency>` reads too. A
// reference among its arguments (`AppState<Shop, &'static str>`) is written as it is.
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

#[derive(Clone)]
struct Currency(&'static str);

#[idem::axum::idempotent(scope = account, state = AppState<Shop, Currency>, backend = sqlx::Postgres)]
async fn touch(
    State(app): State<AppState<Shop, Currency>>,
    account: Extension<i64>,
) -> &'static str {
    let _ = (account.0, app.shop.0);
    app.currency.0
}

#[idem::axum::idempotent(scope = account, state = AppState::<Shop, Currency>, backend = sqlx::Postgres)]
async fn name(
    State(app): State<AppState<Shop, Currency>>,
    account: Extension<i64>,
) -> &'static str {
    let _ = (account.0, app.currency.0);
    app.shop.0
}

#[idem::axum::idempotent(scope = account, state = AppState<Shop, &'static str>, backend = sqlx::Postgres)]
async fn label(
    State(app): State<AppState<Shop, &'static str>>,
    account: Extension<i64>,
) -> &'static str {
    let _ = (account.0, app.shop.0);
    app.currency
}

// Without `state = ..` the handler is generic over the router's state, as before.
#[idem::axum::idempotent(scope = account, backend = sqlx::Postgres)]
async fn plain(
    State(app): State<AppState<Shop, &'static str>>,
    account: Extension<i64>,
) -> &'static str {
    let _ = account.0;
    app.currency
}

fn main() {
    let state = AppState {
        shop: Shop("corner"),
        currency: Currency("EUR"),
    };
    let _: Router = Router::new()
        .route("/touch", post(touch))
        .route("/name", post(name))
        .with_state(state);
    let _: Router = Router::new()
        .route("/label", post(label))
        .route("/plain", post(plain))
        .with_state(AppState {
            shop: Shop("corner"),
            currency: "EUR",
        });
}
