// `backend = ..` takes a database idem supports: one error, at the type written there.
use actix_web::{HttpResponse, post, web};
use idem::idempotent;

#[post("/notes")]
#[idempotent(scope = account, backend = std::string::String)]
async fn create_note(account: web::ReqData<i64>) -> HttpResponse {
    let _ = account;
    HttpResponse::Created().finish()
}

fn main() {}
