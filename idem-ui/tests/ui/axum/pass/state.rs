// `state = AppState`: the handler is for that router state alone, and its extractors are
// checked against it, `State<AppState>` and a substate taken through `FromRef` alike.
use axum::extract::{FromRef, State};
use axum::routing::post;
use axum::{Extension, Json, Router};

#[derive(Clone)]
struct AppState {
    prices: Prices,
}

#[derive(Clone)]
struct Prices {
    currency: &'static str,
}

impl FromRef<AppState> for Prices {
    fn from_ref(state: &AppState) -> Self {
        state.prices.clone()
    }
}

#[idem::axum::idempotent(scope = account, state = AppState)]
async fn create_order(
    State(app): State<AppState>,
    State(prices): State<Prices>,
    account: Extension<i64>,
    tx: idem::Tx<'_, sqlx::Postgres>,
    Json(order): Json<serde_json::Value>,
) -> Json<serde_json::Value> {
    let _ = (&mut *tx, account.0, app.prices.currency, prices.currency);
    Json(order)
}

// The last extractor may read only the head: axum runs it through `FromRequestParts`.
#[idem::axum::idempotent(scope = account, state = AppState, backend = sqlx::Postgres)]
async fn touch(State(prices): State<Prices>, account: Extension<i64>) -> &'static str {
    let _ = account.0;
    prices.currency
}

fn main() {
    let state = AppState {
        prices: Prices { currency: "EUR" },
    };
    let _: Router = Router::new()
        .route("/orders", post(create_order))
        .route("/touch", post(touch))
        .with_state(state);
}
