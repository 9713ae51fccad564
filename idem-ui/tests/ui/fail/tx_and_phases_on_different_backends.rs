// A transaction on SQLite and phases on PostgreSQL: a phased handler has no single
// transaction, so the `Tx` is the parameter to remove, whatever its database.
use actix_web::{HttpResponse, post, web};
use idem::idempotent;

#[post("/payments")]
#[idempotent(scope = account, lease = "30s")]
async fn create_payment(
    account: web::ReqData<i64>,
    tx: idem::Tx<'_, sqlx::Sqlite>,
    phases: idem::Phases<sqlx::Postgres>,
) -> HttpResponse {
    let _ = (account, tx, phases);
    HttpResponse::Created().finish()
}

fn main() {}
