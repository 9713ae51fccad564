use actix_web::{HttpResponse, post, web};
use idem::idempotent;

#[post("/notes")]
#[idempotent(scope = account, backend = "sqlite")]
async fn create_note(account: web::ReqData<i64>) -> HttpResponse {
    let _ = account;
    HttpResponse::Created().finish()
}

fn main() {}
