// `crate = ..` names the path the generated code reaches idem by: here a re-export, as
// a framework built on idem would offer it. (A renamed dependency, where `::idem` does
// not resolve at all, is tested by idem-macros/tests/renamed_dependency.rs.)
use actix_web::{App, HttpResponse, post, web};

mod platform {
    pub use idem as keys;
}

#[post("/orders")]
#[platform::keys::idempotent(scope = account, crate = platform::keys)]
async fn create_order(
    account: web::ReqData<i64>,
    tx: platform::keys::Tx<'_, sqlx::Postgres>,
) -> HttpResponse {
    let _ = (account, &mut *tx);
    HttpResponse::Created().finish()
}

// The string form that tokio's and serde's attributes take.
#[platform::keys::idempotent(scope = account, crate = "crate::platform::keys", lease = "30s")]
#[post("/payments")]
async fn create_payment(
    account: web::ReqData<i64>,
    phases: platform::keys::Phases<sqlx::Postgres>,
) -> HttpResponse {
    let _ = (account, phases);
    HttpResponse::Created().finish()
}

fn main() {
    let _ = App::new().service(create_order).service(create_payment);
}
