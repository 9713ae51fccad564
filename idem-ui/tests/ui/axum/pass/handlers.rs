// axum handlers, single-transaction and phased, beside an actix-web handler in the same
// crate: the attribute's path chooses the framework. The router's state is the
// application's own; idem is in the request's extensions.
use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{post, put};
use axum::{Extension, Json, Router};

#[derive(Clone)]
struct AppState {
    name: &'static str,
}

#[derive(serde::Deserialize)]
struct Page {
    dry_run: Option<bool>,
}

#[derive(serde::Deserialize)]
struct Note {
    text: String,
}

#[idem::axum::idempotent(scope = account, retention = "7d")]
async fn create_order(
    State(state): State<AppState>,
    account: idem::UnverifiedScope<Path<i64>>,
    Query(page): Query<Page>,
    tx: idem::Tx<'_, sqlx::Postgres>,
    Json(order): Json<serde_json::Value>,
) -> Result<(StatusCode, Json<serde_json::Value>), StatusCode> {
    sqlx::query("INSERT INTO orders (account_id, body) VALUES ($1, $2)")
        .bind(account.0.0)
        .bind(order.to_string())
        .execute(&mut *tx)
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    let _ = (state.name, page.dry_run);
    Ok((StatusCode::CREATED, Json(order)))
}

/// A note, with a form body: docs stay on the handler.
#[idem::axum::idempotent(scope = account)]
async fn put_note(
    account: Extension<String>,
    tx: idem::Tx<'_, sqlx::Sqlite>,
    Form(note): Form<Note>,
) -> String {
    let _ = &mut *tx;
    format!("{}: {}", account.0, note.text)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Payment {
    id: i64,
}

#[idem::axum::idempotent(scope = account, lease = "30s")]
async fn create_payment(
    account: Extension<i64>,
    phases: idem::Phases<sqlx::Postgres>,
    body: String,
) -> Result<impl IntoResponse, idem::phased::PhaseError> {
    let payment: Payment = phases
        .run("payment_created", async |mut tx| {
            let id =
                sqlx::query_scalar("INSERT INTO payments (account_id) VALUES ($1) RETURNING id")
                    .bind(account.0)
                    .fetch_one(&mut *tx)
                    .await?;
            Ok::<_, idem::phased::PhaseError>(Payment { id })
        })
        .await?;
    let _ = (phases.derived_key("charge"), body);
    Ok((StatusCode::CREATED, Json(payment)))
}

#[actix_web::post("/actix/orders")]
#[idem::idempotent(scope = account)]
async fn actix_order(
    account: actix_web::web::ReqData<i64>,
    tx: idem::Tx<'_, sqlx::Postgres>,
) -> &'static str {
    let _ = (&*account, &mut *tx);
    "ok"
}

fn main() {
    let _: Router = Router::new()
        .route("/accounts/{account}/orders", post(create_order))
        .route("/accounts/{account}/payments", post(create_payment))
        .with_state(AppState { name: "shop" });
    let _: Router = Router::new()
        .route("/notes/{account}", put(put_note))
        .layer(Extension(String::from("ann")));
    let _ = actix_web::App::new().service(actix_order);
}
