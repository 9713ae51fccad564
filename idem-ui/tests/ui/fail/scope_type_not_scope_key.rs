use actix_web::web;

#[derive(serde::Deserialize)]
struct Account {
    id: i64,
}

#[actix_web::post("/orders")]
#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
async fn create_order(account: web::Query<Account>) -> String {
    account.id.to_string()
}

fn main() {}
