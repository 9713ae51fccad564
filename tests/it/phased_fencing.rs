//! Fencing: once a retry has taken over an attempt whose lease ran out, the old attempt
//! can record nothing: not a phase (its writes roll back), not a lease extension, not a
//! response. The client of the old attempt gets 409 and, retrying, the new outcome.

use crate::phased_support;
use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{post, web};
use axum::{Extension, Router};
use futures_util::future::join;
use idem::phased::PhaseError;
use phased_support::{
    Answer, Gate, PAST_LEASE, create_effects, effect, effects, key_state, recorded_phases,
};
use support::app::Account;
use support::{ALICE, Env, TestApp, post};
use tokio::sync::Notify;

/// Where the first attempt of a test handler is held.
#[derive(Debug, Default)]
struct Control {
    attempts: AtomicUsize,
    /// Holds the first attempt.
    gate: Gate,
    /// Holds the attempt that took over, at the same point, until the first is done.
    retry_gate: Gate,
    /// What the first attempt's calls after the gate returned, for the test to check.
    after_gate: Mutex<Vec<String>>,
}

impl Control {
    fn next_attempt(&self) -> usize {
        self.attempts.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn note(&self, what: String) {
        self.after_gate.lock().unwrap().push(what);
    }

    /// Holds either attempt at its gate.
    async fn hold(&self, attempt: usize) {
        match attempt {
            1 => self.gate.pass().await,
            _ => self.retry_gate.pass().await,
        }
    }
}

/// One phase; the first attempt is held inside it (its transaction open, its write made)
/// until the test opens the gate.
async fn held_in_phase(
    phases: &mut idem::Phases<sqlx::Postgres>,
    control: &Control,
) -> Result<Answer, PhaseError> {
    let attempt = control.next_attempt();
    let id: i64 = phases
        .run("work", async |mut tx| {
            let id = effect(&mut tx, attempt, "work").await?;
            control.hold(attempt).await;
            Ok::<_, PhaseError>(id)
        })
        .await
        .inspect_err(|error| control.note(format!("work: {:?}", error.kind())))?;
    Ok(Answer::text(
        201,
        format!("effect {id} by attempt {attempt}"),
    ))
}

/// Two phases; the first attempt is held between them, then tries to extend its lease
/// and run the second phase.
async fn held_between_phases(
    phases: &mut idem::Phases<sqlx::Postgres>,
    control: &Control,
) -> Result<Answer, PhaseError> {
    let attempt = control.next_attempt();
    let lease = phases.lease();
    let first: i64 = phases
        .run("first", async |mut tx| {
            Ok::<_, PhaseError>(effect(&mut tx, attempt, "first").await?)
        })
        .await?;
    control.hold(attempt).await;
    if attempt == 1 {
        let extended = lease.extend().await;
        control.note(format!("extend: {:?}", extended.map_err(|e| e.kind())));
    }
    let second = phases
        .run("second", async |mut tx| {
            Ok::<_, PhaseError>(effect(&mut tx, attempt, "second").await?)
        })
        .await;
    if attempt == 1 {
        control.note(format!(
            "second: {:?}",
            second.as_ref().map_err(|e| e.kind())
        ));
    }
    let second = second?;
    Ok(Answer::text(
        201,
        format!("{first} {second} by attempt {attempt}"),
    ))
}

/// Both phases run; the first attempt is held after them, before it answers.
async fn held_before_response(
    phases: &mut idem::Phases<sqlx::Postgres>,
    control: &Control,
) -> Result<Answer, PhaseError> {
    let attempt = control.next_attempt();
    let first: i64 = phases
        .run("first", async |mut tx| {
            Ok::<_, PhaseError>(effect(&mut tx, attempt, "first").await?)
        })
        .await?;
    control.hold(attempt).await;
    Ok(Answer::text(
        201,
        format!("effect {first}, answered by attempt {attempt}"),
    ))
}

/// The handlers on actix-web.
mod actix_handlers {
    use super::*;

    #[post("/test/held-in-phase")]
    #[idem::idempotent(scope = account, lease = "1s")]
    pub(super) async fn held_in_phase(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
        control: web::Data<Control>,
    ) -> Result<Answer, PhaseError> {
        let _ = account;
        super::held_in_phase(&mut phases, &control).await
    }

    #[post("/test/held-between-phases")]
    #[idem::idempotent(scope = account, lease = "1s")]
    pub(super) async fn held_between_phases(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
        control: web::Data<Control>,
    ) -> Result<Answer, PhaseError> {
        let _ = account;
        super::held_between_phases(&mut phases, &control).await
    }

    #[post("/test/held-before-response")]
    #[idem::idempotent(scope = account, lease = "1s")]
    pub(super) async fn held_before_response(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
        control: web::Data<Control>,
    ) -> Result<Answer, PhaseError> {
        let _ = account;
        super::held_before_response(&mut phases, &control).await
    }
}

/// The same handlers on axum.
mod axum_handlers {
    use super::*;

    #[idem::axum::idempotent(scope = account, lease = "1s")]
    async fn held_in_phase(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
        Extension(control): Extension<Arc<Control>>,
    ) -> Result<Answer, PhaseError> {
        let _ = account;
        super::held_in_phase(&mut phases, &control).await
    }

    #[idem::axum::idempotent(scope = account, lease = "1s")]
    async fn held_between_phases(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
        Extension(control): Extension<Arc<Control>>,
    ) -> Result<Answer, PhaseError> {
        let _ = account;
        super::held_between_phases(&mut phases, &control).await
    }

    #[idem::axum::idempotent(scope = account, lease = "1s")]
    async fn held_before_response(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
        Extension(control): Extension<Arc<Control>>,
    ) -> Result<Answer, PhaseError> {
        let _ = account;
        super::held_before_response(&mut phases, &control).await
    }

    pub(super) fn routes() -> Router {
        Router::new()
            .route("/test/held-in-phase", axum::routing::post(held_in_phase))
            .route(
                "/test/held-between-phases",
                axum::routing::post(held_between_phases),
            )
            .route(
                "/test/held-before-response",
                axum::routing::post(held_before_response),
            )
    }
}

async fn app(env: &Env, control: &web::Data<Control>) -> TestApp {
    create_effects(env).await;
    let actix_control = control.clone();
    let axum_control = control.clone().into_inner();
    support::service_with_twin(
        &env.idem(),
        move |cfg| {
            cfg.app_data(actix_control)
                .service(actix_handlers::held_in_phase)
                .service(actix_handlers::held_between_phases)
                .service(actix_handlers::held_before_response);
        },
        move || axum_handlers::routes().layer(Extension(axum_control)),
    )
    .await
}

/// Sends the first request and waits until it is held at its gate and its lease has run
/// out; sends the retry, which takes over and is held at the same point; then lets the
/// first attempt go on and finish while the retry is still in progress, and only then
/// lets the retry finish. Returns (first reply, retry reply).
async fn take_over_the_held_attempt(
    app: &TestApp,
    control: &Control,
    uri: &str,
    key: &str,
) -> (support::Reply, support::Reply) {
    let first_done = Notify::new();
    let first = async {
        let reply = app.call(post(uri, ALICE, key, "{}")).await;
        first_done.notify_one();
        reply
    };
    let retry = async {
        control.gate.reached().await;
        tokio::time::sleep(PAST_LEASE).await;
        let retry = app.call(post(uri, ALICE, key, "{}"));
        let sequence = async {
            control.retry_gate.reached().await;
            control.gate.open();
            first_done.notified().await;
            control.retry_gate.open();
        };
        join(retry, sequence).await.0
    };
    join(first, retry).await
}

async fn a_phase_that_outlives_its_lease_is_rolled_back_after_a_takeover() {
    let env = Env::new().await;
    let control = web::Data::new(Control::default());
    let app = app(&env, &control).await;

    let (first, retry) =
        take_over_the_held_attempt(&app, &control, "/test/held-in-phase", "slow-phase").await;

    assert_eq!(retry.status, 201, "{:?}", retry.body);
    assert!(retry.body.ends_with(b"by attempt 2"), "{:?}", retry.body);
    first.assert_idem_problem(409, "request-in-progress");
    assert_eq!(first.header("retry-after"), Some("1"));
    assert_eq!(
        *control.after_gate.lock().unwrap(),
        ["work: TakenOver"],
        "the old attempt learnt it was taken over"
    );
    assert_eq!(
        effects(&env.pool).await,
        [(2, "work".to_owned())],
        "the old attempt's write in the phase was rolled back"
    );
    let (state, point, token, _) = key_state(&env.pool, "slow-phase").await;
    assert_eq!((state.as_str(), point.as_str()), ("completed", "work"));
    assert_eq!(
        recorded_phases(&env.pool, "slow-phase").await,
        [("work".to_owned(), token)]
    );

    let replayed = app
        .call(post("/test/held-in-phase", ALICE, "slow-phase", "{}"))
        .await;
    replayed.assert_replay_of(&retry);
    assert_eq!(control.attempts.load(Ordering::SeqCst), 2);
}

async fn an_attempt_taken_over_between_phases_extends_and_records_nothing() {
    let env = Env::new().await;
    let control = web::Data::new(Control::default());
    let app = app(&env, &control).await;

    let (first, retry) =
        take_over_the_held_attempt(&app, &control, "/test/held-between-phases", "between").await;

    assert_eq!(retry.status, 201, "{:?}", retry.body);
    assert!(retry.body.ends_with(b"by attempt 2"), "{:?}", retry.body);
    first.assert_idem_problem(409, "request-in-progress");
    assert_eq!(
        *control.after_gate.lock().unwrap(),
        ["extend: Err(TakenOver)", "second: Err(TakenOver)"],
        "neither the lease extension nor the phase went through"
    );
    // The first phase ran once (attempt 1), the second once (attempt 2): the retry
    // resumed after `first`, and the old attempt's `second` never ran at all.
    assert_eq!(
        effects(&env.pool).await,
        [(1, "first".to_owned()), (2, "second".to_owned())]
    );
    let phases = recorded_phases(&env.pool, "between").await;
    assert_eq!(phases.len(), 2);
    assert!(
        phases[0].1 < phases[1].1,
        "`second` is recorded by the attempt that took over, with a newer token: {phases:?}"
    );
    let (state, _, token, _) = key_state(&env.pool, "between").await;
    assert_eq!((state.as_str(), token), ("completed", phases[1].1));
}

async fn a_response_from_an_attempt_taken_over_is_not_recorded() {
    let env = Env::new().await;
    let control = web::Data::new(Control::default());
    let app = app(&env, &control).await;

    let (first, retry) =
        take_over_the_held_attempt(&app, &control, "/test/held-before-response", "late").await;

    assert_eq!(retry.status, 201);
    assert!(
        retry.body.ends_with(b"answered by attempt 2"),
        "{:?}",
        retry.body
    );
    // The old attempt finished its handler, but its response was fenced off.
    first.assert_idem_problem(409, "request-in-progress");
    assert_eq!(effects(&env.pool).await, [(1, "first".to_owned())]);
    let replayed = app
        .call(post("/test/held-before-response", ALICE, "late", "{}"))
        .await;
    replayed.assert_replay_of(&retry);
}

support::both_frameworks!(
    #[actix_web::test]
    a_phase_that_outlives_its_lease_is_rolled_back_after_a_takeover,
    #[actix_web::test]
    an_attempt_taken_over_between_phases_extends_and_records_nothing,
    #[actix_web::test]
    a_response_from_an_attempt_taken_over_is_not_recorded,
);
