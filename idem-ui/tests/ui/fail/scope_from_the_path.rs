// A path parameter names the account but proves nothing: it does not scope keys.
use actix_web::{HttpResponse, post, web};

#[post("/accounts/{account}/orders")]
#[idem::idempotent(scope = account)]
async fn create_order(account: web::Path<i64>, tx: idem::Tx<'_, sqlx::Postgres>) -> HttpResponse {
    let _ = (account, tx);
    HttpResponse::Created().finish()
}

fn main() {}
