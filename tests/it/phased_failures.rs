//! Failures in the phased form. Committed phases cannot be rolled back, so a 5xx, a panic
//! or a database failure keeps the key in progress at its recovery point and frees the
//! lease at once: the client's retry resumes without waiting, and the committed phases do
//! not run again. A 4xx is a final answer, stored and replayed like in the
//! single-transaction form.

use crate::phased_support;
use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{post, web};
use axum::{Extension, Router};
use idem::phased::PhaseError;
use phased_support::{Answer, create_effects, effect, effects, key_state, recorded_phases};
use support::app::Account;
use support::{ALICE, Env, Reply, TestApp, post};

/// How the first attempt fails after its phase `first` committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// The handler answers 503.
    Returns503,
    /// The handler panics.
    Panics,
    /// The phase `second` returns an error: it rolls back, the handler answers 500.
    PhaseErr,
    /// A statement of `second` fails and the phase returns `Ok` anyway.
    IgnoresFailedStatement,
    /// `second` commits idem's transaction itself.
    CommitsItself,
    /// The handler answers 402: a final answer.
    Declines,
}

#[derive(Debug)]
struct Control {
    failure: Failure,
    attempts: AtomicUsize,
}

/// How a test handler's run ends before its final answer: idem's own error, or an answer
/// of the handler's (which a phase may return as its error, and then rolls back).
#[derive(Debug)]
enum Failed {
    Idem(PhaseError),
    Answer(Answer),
}

impl From<PhaseError> for Failed {
    fn from(error: PhaseError) -> Self {
        Self::Idem(error)
    }
}

impl From<sqlx::Error> for Failed {
    fn from(error: sqlx::Error) -> Self {
        Self::Answer(Answer::text(500, error.to_string()))
    }
}

/// What either framework's handler returns for `result`.
fn answer(result: Result<Answer, Failed>) -> Result<Answer, PhaseError> {
    match result {
        Ok(answer) | Err(Failed::Answer(answer)) => Ok(answer),
        Err(Failed::Idem(error)) => Err(error),
    }
}

/// Commits `first`, fails the first attempt as `control.failure` says, and runs
/// `second`; every later attempt runs to its 201.
async fn flaky_phases(
    phases: &mut idem::Phases<sqlx::Postgres>,
    control: &Control,
) -> Result<Answer, Failed> {
    let attempt = control.attempts.fetch_add(1, Ordering::SeqCst) + 1;
    let first: i64 = phases
        .run("first", async |mut tx| {
            Ok::<_, PhaseError>(effect(&mut tx, attempt, "first").await?)
        })
        .await?;
    let failure = (attempt == 1).then_some(control.failure);
    match failure {
        Some(Failure::Returns503) => return Ok(Answer::text(503, "busy")),
        Some(Failure::Panics) => panic!("the first attempt panics after `first`"),
        Some(Failure::Declines) => return Ok(Answer::text(402, "declined")),
        _ => {}
    }
    let second: i64 = phases
        .run("second", async |mut tx| {
            let id = effect(&mut tx, attempt, "second").await?;
            match failure {
                // The phase's own error: it rolls back and reaches the handler as is.
                Some(Failure::PhaseErr) => {
                    Err(Failed::Answer(Answer::text(500, "the second phase failed")))
                }
                Some(Failure::IgnoresFailedStatement) => {
                    let _ = sqlx::query("SELECT 1 / 0").execute(&mut *tx).await;
                    Ok(id)
                }
                Some(Failure::CommitsItself) => {
                    sqlx::raw_sql("COMMIT").execute(&mut *tx).await?;
                    Ok(id)
                }
                _ => Ok(id),
            }
        })
        .await?;
    Ok(Answer::text(
        201,
        format!("{first} {second} by attempt {attempt}"),
    ))
}

/// Runs the same phase name twice, which is a bug in the handler.
async fn same_name(phases: &mut idem::Phases<sqlx::Postgres>) -> Result<Answer, PhaseError> {
    phases
        .run("step", async |_tx| Ok::<_, PhaseError>(1))
        .await?;
    phases
        .run("step", async |_tx| Ok::<_, PhaseError>(2))
        .await?;
    Ok(Answer::text(201, ""))
}

/// The leases handlers handed to the test.
type Kept = Mutex<Vec<idem::phased::Lease<sqlx::Postgres>>>;

/// Hands its lease to the test (as a heartbeat task would keep it), then answers 503.
fn kept_lease(phases: &idem::Phases<sqlx::Postgres>, kept: &Kept) -> Answer {
    kept.lock().unwrap().push(phases.lease());
    Answer::text(503, "")
}

/// The handlers on actix-web.
mod actix_handlers {
    use super::*;

    #[post("/test/flaky-phases")]
    #[idem::idempotent(scope = account, lease = "30s")]
    pub(super) async fn flaky_phases(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
        control: web::Data<Control>,
    ) -> Result<Answer, PhaseError> {
        let _ = account;
        answer(super::flaky_phases(&mut phases, &control).await)
    }

    #[post("/test/same-name")]
    #[idem::idempotent(scope = account, lease = "30s")]
    pub(super) async fn same_name(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
    ) -> Result<Answer, PhaseError> {
        let _ = account;
        super::same_name(&mut phases).await
    }

    #[post("/test/kept-lease")]
    #[idem::idempotent(scope = account, lease = "30s")]
    pub(super) async fn kept_lease(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
        kept: web::Data<Kept>,
    ) -> Answer {
        let _ = account;
        super::kept_lease(&phases, &kept)
    }
}

/// The same handlers on axum.
mod axum_handlers {
    use super::*;

    #[idem::axum::idempotent(scope = account, lease = "30s")]
    async fn flaky_phases(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
        Extension(control): Extension<Arc<Control>>,
    ) -> Result<Answer, PhaseError> {
        let _ = account;
        answer(super::flaky_phases(&mut phases, &control).await)
    }

    #[idem::axum::idempotent(scope = account, lease = "30s")]
    async fn same_name(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
    ) -> Result<Answer, PhaseError> {
        let _ = account;
        super::same_name(&mut phases).await
    }

    #[idem::axum::idempotent(scope = account, lease = "30s")]
    async fn kept_lease(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
        Extension(kept): Extension<Arc<Kept>>,
    ) -> Answer {
        let _ = account;
        super::kept_lease(&phases, &kept)
    }

    pub(super) fn routes() -> Router {
        Router::new()
            .route("/test/flaky-phases", axum::routing::post(flaky_phases))
            .route("/test/same-name", axum::routing::post(same_name))
    }

    pub(super) fn kept_lease_route() -> Router {
        Router::new().route("/test/kept-lease", axum::routing::post(kept_lease))
    }
}

async fn app(env: &Env, failure: Failure) -> (TestApp, web::Data<Control>) {
    create_effects(env).await;
    let control = web::Data::new(Control {
        failure,
        attempts: AtomicUsize::new(0),
    });
    let app = {
        let actix_control = control.clone();
        let axum_control = control.clone().into_inner();
        support::service_with_twin(
            &env.idem(),
            move |cfg| {
                cfg.app_data(actix_control)
                    .service(actix_handlers::flaky_phases)
                    .service(actix_handlers::same_name);
            },
            move || axum_handlers::routes().layer(Extension(axum_control)),
        )
        .await
    };
    (app, control)
}

fn request() -> support::TestRequest {
    post("/test/flaky-phases", ALICE, "flaky", "{}")
}

/// The first attempt fails as `failure` says; the key stays at `first` with its lease
/// freed, and an immediate retry resumes after `first` and completes.
async fn resume_after(failure: Failure, check_failed: impl FnOnce(&Reply)) {
    let env = Env::new().await;
    let (app, control) = app(&env, failure).await;

    let failed = app.call(request()).await;
    check_failed(&failed);
    assert!(!failed.replayed());
    let (state, point, _, leased) = key_state(&env.pool, "flaky").await;
    assert_eq!(
        (state.as_str(), point.as_str(), leased),
        ("started", "first", false),
        "{failure:?}: in progress at `first`, lease freed"
    );
    assert_eq!(
        effects(&env.pool).await,
        [(1, "first".to_owned())],
        "{failure:?}"
    );

    // No wait for the 30 s lease: it was released.
    let retried = app.call(request()).await;
    assert_eq!(retried.status, 201, "{failure:?}: {:?}", retried.body);
    assert!(
        retried.body.ends_with(b"by attempt 2"),
        "{:?}",
        retried.body
    );
    assert_eq!(
        effects(&env.pool).await,
        [(1, "first".to_owned()), (2, "second".to_owned())],
        "{failure:?}: `first` did not run again; the failed `second` left nothing"
    );
    assert_eq!(recorded_phases(&env.pool, "flaky").await.len(), 2);
    app.call(request()).await.assert_replay_of(&retried);
    assert_eq!(control.attempts.load(Ordering::SeqCst), 2);
}

async fn a_5xx_keeps_the_committed_phases_for_the_retry() {
    resume_after(Failure::Returns503, |reply| {
        assert_eq!(reply.status, 503);
        assert_eq!(&reply.body[..], b"busy");
    })
    .await;
}

async fn a_panic_keeps_the_committed_phases_for_the_retry() {
    resume_after(Failure::Panics, |reply| {
        reply.assert_idem_problem(500, "handler-panicked");
    })
    .await;
}

async fn a_failed_phase_rolls_back_alone() {
    resume_after(Failure::PhaseErr, |reply| {
        assert_eq!(reply.status, 500);
        assert_eq!(&reply.body[..], b"the second phase failed");
    })
    .await;
}

async fn a_phase_that_ignores_a_failed_statement_is_not_recorded() {
    resume_after(Failure::IgnoresFailedStatement, |reply| {
        reply.assert_idem_problem(500, "transaction-aborted");
    })
    .await;
}

async fn a_phase_that_commits_by_hand_is_caught() {
    let env = Env::new().await;
    let (app, _) = app(&env, Failure::CommitsItself).await;
    let failed = app.call(request()).await;
    failed.assert_idem_problem(500, "transaction-ended");
    // Its COMMIT made its write durable outside idem's record: the phase is not recorded
    // (so a retry would run it again), which is why phases must never end the transaction.
    assert_eq!(
        effects(&env.pool).await,
        [(1, "first".to_owned()), (1, "second".to_owned())]
    );
    assert_eq!(recorded_phases(&env.pool, "flaky").await.len(), 1);
}

async fn a_4xx_is_final_and_replayed() {
    let env = Env::new().await;
    let (app, control) = app(&env, Failure::Declines).await;
    let declined = app.call(request()).await;
    assert_eq!(declined.status, 402);
    let (state, ..) = key_state(&env.pool, "flaky").await;
    assert_eq!(state, "completed");
    app.call(request()).await.assert_replay_of(&declined);
    assert_eq!(control.attempts.load(Ordering::SeqCst), 1);
}

async fn a_database_failure_in_a_phase_answers_503_and_resumes() {
    let env = Env::new().await;
    let (app, _) = app(&env, Failure::Returns503).await;
    // Nowhere to record phases: the first phase's record fails.
    sqlx::query("ALTER TABLE idem_phases RENAME TO idem_phases_away")
        .execute(&env.pool)
        .await
        .expect("hide idem_phases");
    let failed = app.call(request()).await;
    failed.assert_idem_problem(503, "storage-unavailable");
    assert_eq!(failed.header("retry-after"), Some("1"));
    assert!(effects(&env.pool).await.is_empty(), "the phase rolled back");
    let (state, point, _, leased) = key_state(&env.pool, "flaky").await;
    assert_eq!(
        (state.as_str(), point.as_str(), leased),
        ("started", "started", false)
    );

    sqlx::query("ALTER TABLE idem_phases_away RENAME TO idem_phases")
        .execute(&env.pool)
        .await
        .expect("restore idem_phases");
    // The attempt counter says 2: this retry runs `first` for the first time and is not
    // failed by the 503 the first attempt would have answered.
    let retried = app.call(request()).await;
    assert_eq!(retried.status, 201, "{:?}", retried.body);
    assert_eq!(
        effects(&env.pool).await,
        [(2, "first".to_owned()), (2, "second".to_owned())]
    );
}

async fn a_phase_name_used_twice_is_a_bug_reported_as_500() {
    let env = Env::new().await;
    let (app, _) = app(&env, Failure::Declines).await;
    let reply = app
        .call(post("/test/same-name", ALICE, "twice", "{}"))
        .await;
    reply.assert_idem_problem(500, "handler-panicked");
    assert_eq!(recorded_phases(&env.pool, "twice").await.len(), 1);
}

/// A lease kept past the handler (a heartbeat task) cannot extend the released lease and
/// hold off the retry.
async fn a_lease_kept_past_the_handler_stops_extending() {
    let env = Env::new().await;
    let kept = web::Data::new(Kept::default());
    let app = {
        let actix_kept = kept.clone();
        let axum_kept = kept.clone().into_inner();
        support::service_with_twin(
            &env.idem(),
            move |cfg| {
                cfg.app_data(actix_kept).service(actix_handlers::kept_lease);
            },
            move || axum_handlers::kept_lease_route().layer(Extension(axum_kept)),
        )
        .await
    };
    let request = || post("/test/kept-lease", ALICE, "kept", "{}");
    assert_eq!(app.call(request()).await.status, 503);
    let lease = kept
        .lock()
        .unwrap()
        .pop()
        .expect("the handler kept its lease");
    let extended = lease.extend().await;
    assert_eq!(
        extended.map_err(|e| e.kind()),
        Err(idem::phased::PhaseErrorKind::Finished)
    );
    let (_, _, _, leased) = key_state(&env.pool, "kept").await;
    assert!(!leased, "the lease stays released");
    // The retry takes over at once (and fails the same way).
    assert_eq!(app.call(request()).await.status, 503);
}

support::both_frameworks!(
    #[actix_web::test]
    a_5xx_keeps_the_committed_phases_for_the_retry,
    #[actix_web::test]
    a_panic_keeps_the_committed_phases_for_the_retry,
    #[actix_web::test]
    a_failed_phase_rolls_back_alone,
    #[actix_web::test]
    a_phase_that_ignores_a_failed_statement_is_not_recorded,
    #[actix_web::test]
    a_phase_that_commits_by_hand_is_caught,
    #[actix_web::test]
    a_4xx_is_final_and_replayed,
    #[actix_web::test]
    a_database_failure_in_a_phase_answers_503_and_resumes,
    #[actix_web::test]
    a_phase_name_used_twice_is_a_bug_reported_as_500,
    #[actix_web::test]
    a_lease_kept_past_the_handler_stops_extending,
);
