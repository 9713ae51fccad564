//! `POST /test/single/{size}`, `POST /test/phased/{size}` and
//! `POST /test/unfinishable/{size}`: an answer of `size` bytes from each form, for the
//! tests of large answers (`large_answers.rs`, and `large_answer_buffers.rs`, which needs
//! a binary of its own for its allocator), on both frameworks. Each handler's work is
//! written once, below; the actix-web and axum handlers only extract and call it.

#![allow(dead_code)] // Each test file uses the part of this module it needs.

use actix_web::web;
use axum::Router;
use axum::extract::Path;

use crate::support::app::Account;

/// Every byte value, so that the binary `COPY` format is tried on all of them.
pub(crate) fn answer(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i % 251) as u8).collect()
}

/// The phased form's work: one phase, then the answer.
async fn phased_answer(
    phases: &mut idem::Phases<sqlx::Postgres>,
    size: usize,
) -> Result<Vec<u8>, idem::phased::PhaseError> {
    phases
        .run(
            "answered",
            async |_tx| Ok::<_, idem::phased::PhaseError>(()),
        )
        .await?;
    Ok(answer(size))
}

/// The COPY edge tests' phased work (`large_answer_drops`, `large_answer_failures`): a
/// row of their `effects` table written in a phase, so that a test can count executions;
/// the answer is staged outside the phase's transaction.
pub(crate) async fn phased_effect(
    phases: &mut idem::Phases<sqlx::Postgres>,
    size: usize,
) -> Result<Vec<u8>, idem::phased::PhaseError> {
    phases
        .run("effect", async |mut tx| {
            sqlx::raw_sql("INSERT INTO effects DEFAULT VALUES")
                .execute(&mut *tx)
                .await
                .map(drop)
                .map_err(idem::phased::PhaseError::from)
        })
        .await?;
    Ok(answer(size))
}

/// Writes a child of a parent that does not exist: the deferred foreign key lets the
/// statement through and fails the COMMIT, so idem's completion (its staged body
/// included) is rolled back with the handler's writes. The test creates the tables.
async fn unfinishable_answer(tx: &mut idem::Tx<'_, sqlx::Postgres>, size: usize) -> Vec<u8> {
    sqlx::raw_sql("INSERT INTO children (parent_id) VALUES (7)")
        .execute(&mut **tx)
        .await
        .expect("a deferred constraint is not checked before COMMIT");
    answer(size)
}

mod on_actix {
    use super::*;

    #[idem::idempotent(scope = account, backend = sqlx::Postgres)]
    pub(super) async fn single(account: Account, size: web::Path<usize>) -> Vec<u8> {
        let _ = account;
        answer(size.into_inner())
    }

    #[idem::idempotent(scope = account, lease = "30s")]
    pub(super) async fn phased(
        account: Account,
        size: web::Path<usize>,
        phases: idem::Phases<sqlx::Postgres>,
    ) -> Result<Vec<u8>, idem::phased::PhaseError> {
        let _ = account;
        phased_answer(&mut phases, size.into_inner()).await
    }

    #[idem::idempotent(scope = account)]
    pub(super) async fn unfinishable(
        account: Account,
        size: web::Path<usize>,
        tx: idem::Tx<'_, sqlx::Postgres>,
    ) -> Vec<u8> {
        let _ = account;
        unfinishable_answer(&mut tx, size.into_inner()).await
    }
}

mod on_axum {
    use super::*;

    #[idem::axum::idempotent(scope = account, backend = sqlx::Postgres)]
    pub(super) async fn single(account: Account, Path(size): Path<usize>) -> Vec<u8> {
        let _ = account;
        answer(size)
    }

    #[idem::axum::idempotent(scope = account, lease = "30s")]
    pub(super) async fn phased(
        account: Account,
        Path(size): Path<usize>,
        phases: idem::Phases<sqlx::Postgres>,
    ) -> Result<Vec<u8>, idem::phased::PhaseError> {
        let _ = account;
        phased_answer(&mut phases, size).await
    }

    #[idem::axum::idempotent(scope = account)]
    pub(super) async fn unfinishable(
        account: Account,
        Path(size): Path<usize>,
        tx: idem::Tx<'_, sqlx::Postgres>,
    ) -> Vec<u8> {
        let _ = account;
        unfinishable_answer(&mut tx, size).await
    }
}

/// The application with the single and phased routes on the test's framework, and
/// `unfinishable` too when asked.
pub(crate) async fn app(
    idem: &idem::Idem<sqlx::Postgres>,
    unfinishable: bool,
) -> crate::support::TestApp {
    crate::support::service_with_twin(idem, actix_routes(unfinishable), || {
        axum_routes(unfinishable)
    })
    .await
}

/// [`app`] behind a real HTTP server (`support::serve_with_twin`).
pub(crate) async fn serve(
    idem: &idem::Idem<sqlx::Postgres>,
    unfinishable: bool,
) -> (String, crate::support::Server) {
    crate::support::serve_with_twin(idem, actix_routes(unfinishable), axum_routes(unfinishable))
        .await
}

fn actix_routes(unfinishable: bool) -> impl Fn(&mut web::ServiceConfig) + Clone + Send + 'static {
    move |cfg| {
        cfg.route("/test/single/{size}", web::post().to(on_actix::single))
            .route("/test/phased/{size}", web::post().to(on_actix::phased));
        if unfinishable {
            cfg.route(
                "/test/unfinishable/{size}",
                web::post().to(on_actix::unfinishable),
            );
        }
    }
}

fn axum_routes(unfinishable: bool) -> Router {
    use axum::routing::post;
    let routes = Router::new()
        .route("/test/single/{size}", post(on_axum::single))
        .route("/test/phased/{size}", post(on_axum::phased));
    if unfinishable {
        routes.route("/test/unfinishable/{size}", post(on_axum::unfinishable))
    } else {
        routes
    }
}
