// With both `postgres` and `sqlite` enabled (idem's default features), a bare `idem::Tx`
// names no database: a crate elsewhere in the graph turning one on must not change it.
use actix_web::{HttpResponse, post, web};
use idem::idempotent;

#[post("/orders")]
#[idempotent(scope = account)]
async fn create_order(account: web::ReqData<i64>, tx: idem::Tx) -> HttpResponse {
    let _ = (account, tx);
    HttpResponse::Created().finish()
}

fn main() {}
