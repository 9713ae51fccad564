// `state = ..` is axum's: an actix-web handler has no router state.
#[derive(Clone)]
struct AppState;

#[idem::idempotent(scope = account, state = AppState, backend = sqlx::Postgres)]
async fn create_order(account: actix_web::web::ReqData<i64>) -> &'static str {
    let _ = &*account;
    "ok"
}

fn main() {}
