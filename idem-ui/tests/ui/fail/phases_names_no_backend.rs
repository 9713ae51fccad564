// With both databases enabled, a bare `idem::Phases` names no database.
use actix_web::{HttpResponse, post, web};
use idem::idempotent;

#[post("/payments")]
#[idempotent(scope = account, lease = "30s")]
async fn create_payment(account: web::ReqData<i64>, phases: idem::Phases) -> HttpResponse {
    let _ = (account, phases);
    HttpResponse::Created().finish()
}

fn main() {}
