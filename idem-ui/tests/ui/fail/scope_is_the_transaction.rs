#[actix_web::post("/orders")]
#[idem::idempotent(scope = tx)]
async fn create_order(tx: idem::Tx<'_, sqlx::Postgres>) -> &'static str {
    "created"
}

fn main() {}
