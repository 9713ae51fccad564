// `#[idempotent]` outside `#[post]`, other attributes kept, an `impl Responder` return,
// a path parameter as the scope (authorized before idem runs, hence `UnverifiedScope`), no
// transaction parameter, and a longer retention.
use actix_web::{App, Responder, post, web};

/// Docs stay on the registered handler.
#[idem::idempotent(scope = account, retention = "7d", backend = sqlx::Postgres)]
#[post("/accounts/{account}/pings")]
#[must_use = "kept on the user's function"]
async fn ping(
    account: idem::UnverifiedScope<web::Path<u64>>,
    query: web::Query<Vec<(String, String)>>,
) -> impl Responder {
    format!("{} {}", account.into_inner().into_inner(), query.len())
}

/// A helper taking the connection accepts `&mut tx`.
async fn audit(conn: &mut sqlx::PgConnection) -> sqlx::Result<()> {
    sqlx::query("SELECT 1").execute(conn).await.map(drop)
}

#[idem::idempotent(scope = key)]
#[actix_web::put("/things/{key}")]
async fn put_thing(
    key: idem::UnverifiedScope<web::Path<String>>,
    tx: idem::Tx<'_, sqlx::Postgres>,
    body: String,
) -> actix_web::HttpResponse {
    let _ = audit(&mut tx).await;
    actix_web::HttpResponse::Ok().body(format!("{}:{body}", **key))
}

fn main() {
    let _ = App::new().service(ping).service(put_thing);
}
