// `#[routes]` registers every method attribute below it: the GET among them is refused.
use actix_web::routes;

#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
#[routes]
#[post("/accounts/{account}/orders")]
#[get("/accounts/{account}/orders")]
async fn orders(account: actix_web::web::ReqData<i64>) -> &'static str {
    "orders"
}

fn main() {}
