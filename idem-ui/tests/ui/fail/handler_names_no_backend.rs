// With both databases enabled, a handler with neither `Tx` nor `Phases` says in the
// attribute which database's `Idem` keeps its keys.
use actix_web::{HttpResponse, post, web};
use idem::idempotent;

#[post("/notes")]
#[idempotent(scope = account, retention = "24h")]
async fn create_note(account: web::ReqData<i64>) -> HttpResponse {
    let _ = account;
    HttpResponse::Created().finish()
}

fn main() {}
