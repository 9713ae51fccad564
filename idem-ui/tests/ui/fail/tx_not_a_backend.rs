// The type parameter of `idem::Tx<'_, sqlx::Postgres>` names the database; it must be one idem supports.
use actix_web::{HttpResponse, post, web};
use idem::idempotent;

#[post("/orders")]
#[idempotent(scope = account)]
async fn create_order(account: web::ReqData<i64>, tx: idem::Tx<'_, String>) -> HttpResponse {
    let _ = (account, tx);
    HttpResponse::Created().finish()
}

fn main() {}
