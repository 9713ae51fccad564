// A `String` parameter is the request body as text: the client chooses it, so it cannot
// scope keys, although `String` is a `ScopeKey` (for `ReqData<String>` and the like).
use actix_web::{HttpResponse, post};

#[post("/orders")]
#[idem::idempotent(scope = caller, backend = sqlx::Postgres)]
async fn create_order(caller: String) -> HttpResponse {
    let _ = caller;
    HttpResponse::Created().finish()
}

#[post("/refunds")]
#[idem::idempotent(scope = caller, backend = sqlx::Postgres)]
async fn create_refund(caller: actix_web::web::Bytes) -> HttpResponse {
    let _ = caller;
    HttpResponse::Created().finish()
}

fn main() {}
