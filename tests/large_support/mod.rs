//! `POST /test/single/{size}` and `POST /test/phased/{size}`: an answer of `size` bytes
//! from each form, for the tests of large answers (`large_answers.rs`, and
//! `large_answer_buffers.rs`, which needs a binary of its own for its allocator).

use actix_web::{HttpResponse, web};

use crate::support::app::Account;

/// Every byte value, so that the binary `COPY` format is tried on all of them.
pub(crate) fn answer(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i % 251) as u8).collect()
}

#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
async fn single(account: Account, size: web::Path<usize>) -> HttpResponse {
    let _ = account;
    HttpResponse::Ok().body(answer(size.into_inner()))
}

#[idem::idempotent(scope = account, lease = "30s")]
async fn phased(
    account: Account,
    size: web::Path<usize>,
    phases: idem::Phases<sqlx::Postgres>,
) -> Result<HttpResponse, idem::PhaseError> {
    let _ = account;
    phases
        .run("answered", async |_tx| Ok::<_, idem::PhaseError>(()))
        .await?;
    Ok(HttpResponse::Ok().body(answer(size.into_inner())))
}

/// Registers both routes.
pub(crate) fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/test/single/{size}", web::post().to(single))
        .route("/test/phased/{size}", web::post().to(phased));
}
