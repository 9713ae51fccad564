// With both databases enabled, everything that names its database compiles: the type
// parameter of `Tx` and `Phases`, `backend = ..` for a handler with neither, and the
// operator's types.
use actix_web::{App, HttpResponse, post, web};
use idem::idempotent;

#[post("/orders")]
#[idempotent(scope = account)]
async fn create_order(account: web::ReqData<i64>, tx: idem::Tx<'_, sqlx::Sqlite>) -> HttpResponse {
    let _ = (account, tx);
    HttpResponse::Created().finish()
}

#[post("/payments")]
#[idempotent(scope = account, lease = "30s")]
async fn create_payment(
    account: web::ReqData<i64>,
    phases: idem::Phases<sqlx::Postgres>,
) -> HttpResponse {
    let _ = (account, phases);
    HttpResponse::Created().finish()
}

#[post("/notes")]
#[idempotent(scope = account, backend = sqlx::Sqlite)]
async fn create_note(account: web::ReqData<i64>) -> HttpResponse {
    let _ = account;
    HttpResponse::Created().finish()
}

fn insert_order(tx: &mut idem::Tx<'_, sqlx::Postgres>) {
    let _ = tx;
}

fn operator(
    pool: sqlx::PgPool,
) -> (
    idem::Idem<sqlx::Postgres>,
    idem::outbox::Relay<sqlx::Postgres>,
    idem::admin::Expiry<sqlx::Postgres>,
) {
    // The functions that take a pool infer the database from it.
    drop(idem::migrate(&pool));
    (
        idem::Idem::new(pool.clone()),
        idem::outbox::Relay::new(pool.clone()),
        idem::admin::Expiry::new(pool),
    )
}

fn main() {
    let _ = (insert_order, operator);
    let _ = idem::admin::Expiry::DEFAULT_BATCH_SIZE;
    let _ = App::new()
        .service(create_order)
        .service(create_payment)
        .service(create_note);
}
