// The backend comes from the type of the transaction (or phases) parameter: SQLite here,
// with the route attribute on either side, and a handler generic over the backend.
use actix_web::{App, HttpResponse, post, web};
use idem::idempotent;

#[post("/orders")]
#[idempotent(scope = account, retention = "24h")]
async fn create_order(
    account: web::ReqData<i64>,
    tx: idem::Tx<'_, sqlx::Sqlite>,
    body: web::Json<serde_json::Value>,
) -> actix_web::Result<HttpResponse> {
    let id: i64 =
        sqlx::query_scalar("INSERT INTO orders (account_id, body) VALUES ($1, $2) RETURNING id")
            .bind(*account)
            .bind(body.to_string())
            .fetch_one(&mut *tx)
            .await
            .map_err(actix_web::error::ErrorInternalServerError)?;
    Ok(HttpResponse::Created().json(id))
}

#[idempotent(scope = account, retention = "24h", lease = "30s")]
#[post("/payments")]
async fn create_payment(
    account: web::ReqData<i64>,
    phases: idem::Phases<sqlx::Sqlite>,
) -> actix_web::Result<HttpResponse> {
    let id: i64 = phases
        .run("created", async |mut tx| {
            sqlx::query_scalar("INSERT INTO payments (account_id) VALUES ($1) RETURNING id")
                .bind(*account)
                .fetch_one(&mut *tx)
                .await
                .map_err(actix_web::error::ErrorInternalServerError)
        })
        .await?;
    Ok(HttpResponse::Created().json(id))
}

// Generic over the backend: registered with `.route(..)`, as route attributes take no
// generic handlers.
#[idempotent(scope = account, retention = "24h")]
async fn touch<DB: idem::Backend>(
    account: web::ReqData<i64>,
    tx: idem::Tx<'_, DB>,
) -> HttpResponse {
    let _ = (&*account, &mut *tx);
    HttpResponse::NoContent().finish()
}

fn main() {
    let _ = App::new()
        .service(create_order)
        .service(create_payment)
        .route("/touch/{account}", web::post().to(touch::<sqlx::Sqlite>))
        .route(
            "/touch-pg/{account}",
            web::post().to(touch::<sqlx::Postgres>),
        );
}
