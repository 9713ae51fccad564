// The transaction's type names the database; `backend` beside it could only disagree.
use actix_web::{HttpResponse, post, web};
use idem::idempotent;

#[post("/orders")]
#[idempotent(scope = account, backend = sqlx::Postgres)]
async fn create_order(account: web::ReqData<i64>, tx: idem::Tx<'_, sqlx::Sqlite>) -> HttpResponse {
    let _ = (account, tx);
    HttpResponse::Created().finish()
}

fn main() {}
