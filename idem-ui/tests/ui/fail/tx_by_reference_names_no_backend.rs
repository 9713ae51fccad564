// With both `postgres` and `sqlite` enabled, a handler's `&mut idem::Tx<'_>` is wrong
// twice: idem passes the transaction by value, and a bare `Tx` names no database. One
// error says both.
use actix_web::{HttpResponse, post, web};
use idem::idempotent;

#[post("/orders")]
#[idempotent(scope = account)]
async fn create_order(account: web::ReqData<i64>, tx: &mut idem::Tx<'_>) -> HttpResponse {
    let _ = (account, tx);
    HttpResponse::Created().finish()
}

fn main() {}
