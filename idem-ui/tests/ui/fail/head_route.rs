// HEAD is safe to retry already: the error points at the attribute's name.
#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
#[actix_web::head("/accounts/{account}/orders")]
async fn count_orders(account: actix_web::web::ReqData<i64>) -> &'static str {
    ""
}

fn main() {}
