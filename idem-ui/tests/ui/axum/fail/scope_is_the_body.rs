// In axum too a `String` parameter is the request body, chosen by the client.
#[idem::axum::idempotent(scope = caller, backend = sqlx::Postgres)]
async fn create_order(caller: String) -> String {
    caller
}

fn main() {}
