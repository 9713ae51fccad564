//! A phased handler whose final answer is larger than `Idem::max_stored_bytes`: its phases
//! committed and cannot be undone, so idem records the `response-too-large` problem as the
//! key's answer. The key completes, every retry gets that answer as a replay, and no
//! retry runs the handler (or a phase) again.

use crate::phased_support;
use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix_web::web;
use axum::{Extension, Router};
use phased_support::Answer;
use support::app::Account;
use support::{ALICE, Env, TestBackend, by_database, post};

/// What the handler did: how often it ran, how often its phase ran.
#[derive(Debug, Default)]
struct Runs {
    handler: AtomicUsize,
    phase: AtomicUsize,
}

/// The stored limit of these tests; the handler answers twice as much.
const LIMIT: usize = 1024;

async fn big_answer<DB: idem::Backend>(
    phases: &mut idem::Phases<DB>,
    runs: &Runs,
) -> Result<Answer, idem::phased::PhaseError> {
    runs.handler.fetch_add(1, Ordering::SeqCst);
    phases
        .run("charged", async |_tx| {
            runs.phase.fetch_add(1, Ordering::SeqCst);
            Ok::<_, idem::phased::PhaseError>(())
        })
        .await?;
    Ok(Answer::text(201, "x".repeat(2 * LIMIT)))
}

/// `POST /test/big` on actix-web.
#[idem::idempotent(scope = account, lease = "30s")]
async fn big_answer_on_actix<DB: idem::Backend>(
    account: Account,
    phases: idem::Phases<DB>,
    runs: web::Data<Runs>,
) -> Result<Answer, idem::phased::PhaseError> {
    let _ = account;
    big_answer(&mut phases, &runs).await
}

/// `POST /test/big` on axum, once per database: idempotent axum handlers are not generic.
macro_rules! axum_route {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::*;

            #[idem::axum::idempotent(scope = account, lease = "30s")]
            async fn big_answer(
                account: Account,
                phases: idem::Phases<$db>,
                Extension(runs): Extension<Arc<Runs>>,
            ) -> Result<Answer, idem::phased::PhaseError> {
                let _ = account;
                super::big_answer(&mut phases, &runs).await
            }

            pub(super) fn route() -> Router {
                Router::new().route("/test/big", axum::routing::post(big_answer))
            }
        }
    };
}

axum_route!(axum_on_postgres, sqlx::Postgres);
axum_route!(axum_on_sqlite, sqlx::Sqlite);

async fn an_oversized_phased_answer_is_recorded_as_a_problem<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let idem = env.idem().max_stored_bytes(LIMIT);
    let runs = web::Data::new(Runs::default());
    let actix_runs = runs.clone();
    let axum_runs = runs.clone().into_inner();
    let app = support::service_with_twin(
        &idem,
        move |cfg| {
            cfg.app_data(actix_runs)
                .route("/test/big", web::post().to(big_answer_on_actix::<DB>));
        },
        move || {
            by_database::<DB, _>(axum_on_postgres::route, axum_on_sqlite::route)
                .layer(Extension(axum_runs))
        },
    )
    .await;

    let first = app.call(post("/test/big", ALICE, "big-1", "{}")).await;
    let problem = first.assert_idem_problem(500, "response-too-large");
    assert!(!first.replayed(), "the first answer is not a replay");
    let detail = problem["detail"].as_str().expect("detail");
    assert!(
        detail.contains("was carried out") && detail.contains("every retry"),
        "{detail}"
    );

    for _ in 0..3 {
        let retry = app.call(post("/test/big", ALICE, "big-1", "{}")).await;
        assert_eq!(retry.status, 500);
        assert!(retry.replayed(), "a retry replays the recorded answer");
        assert_eq!(retry.body, first.body, "byte-identical");
    }
    assert_eq!(runs.handler.load(Ordering::SeqCst), 1, "never ran again");
    assert_eq!(runs.phase.load(Ordering::SeqCst), 1);
    let rows = env.key_rows().await;
    assert_eq!(
        rows,
        [(
            ALICE.to_string(),
            "big-1".to_owned(),
            "completed".to_owned(),
            Some(500)
        )],
        "the key completed; nothing left in progress"
    );
}

support::backend_tests!(an_oversized_phased_answer_is_recorded_as_a_problem);
