// The type parameter of `idem::Phases` names the database: one error, at that type.
use actix_web::{HttpResponse, post, web};
use idem::idempotent;

#[post("/payments")]
#[idempotent(scope = account, lease = "30s")]
async fn create_payment(account: web::ReqData<i64>, phases: idem::Phases<u8>) -> HttpResponse {
    let _ = (account, phases);
    HttpResponse::Created().finish()
}

fn main() {}
