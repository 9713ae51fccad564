//! Many retries racing to take over a crashed attempt: exactly one takes over and runs
//! the rest of the handler; every other gets 409 with `Retry-After: 1` or, once the
//! winner has finished, a replay of its response.

use crate::phased_support;
use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{post, web};
use axum::{Extension, Router};
use futures_util::future::{join_all, select};
use idem::phased::PhaseError;
use phased_support::{Answer, Gate, PAST_LEASE, create_effects, effect, effects, recorded_phases};
use support::app::Account;
use support::{ALICE, Env, Reply, post};

const RETRIES: usize = 20;

#[derive(Debug, Default)]
struct Control {
    attempts: AtomicUsize,
    /// Where the first attempt "dies": after its first phase committed.
    gate: Gate,
    /// The recovery point each attempt after the first started from.
    resumed_from: Mutex<Vec<Option<String>>>,
}

async fn crashy(
    phases: &mut idem::Phases<sqlx::Postgres>,
    control: &Control,
) -> Result<Answer, PhaseError> {
    let attempt = control.attempts.fetch_add(1, Ordering::SeqCst) + 1;
    if attempt > 1 {
        let point = phases.recovery_point().map(str::to_owned);
        control.resumed_from.lock().unwrap().push(point);
    }
    let first: i64 = phases
        .run("first", async |mut tx| {
            Ok::<_, PhaseError>(effect(&mut tx, attempt, "first").await?)
        })
        .await?;
    if attempt == 1 {
        control.gate.die().await;
    }
    let second: i64 = phases
        .run("second", async |mut tx| {
            Ok::<_, PhaseError>(effect(&mut tx, attempt, "second").await?)
        })
        .await?;
    Ok(Answer::text(
        201,
        format!("{first} {second} by attempt {attempt}"),
    ))
}

/// `POST /test/crashy` on actix-web.
#[post("/test/crashy")]
#[idem::idempotent(scope = account, lease = "1s")]
async fn crashy_on_actix(
    account: Account,
    phases: idem::Phases<sqlx::Postgres>,
    control: web::Data<Control>,
) -> Result<Answer, PhaseError> {
    let _ = account;
    crashy(&mut phases, &control).await
}

/// `POST /test/crashy` on axum.
#[idem::axum::idempotent(scope = account, lease = "1s")]
async fn crashy_on_axum(
    account: Account,
    phases: idem::Phases<sqlx::Postgres>,
    Extension(control): Extension<Arc<Control>>,
) -> Result<Answer, PhaseError> {
    let _ = account;
    crashy(&mut phases, &control).await
}

async fn of_many_retries_after_the_lease_exactly_one_takes_over() {
    let env = Env::new().await;
    create_effects(&env).await;
    let control = web::Data::new(Control::default());
    let app = {
        let actix_control = control.clone();
        let axum_control = control.clone().into_inner();
        support::service_with_twin(
            &env.idem(),
            move |cfg| {
                cfg.app_data(actix_control).service(crashy_on_actix);
            },
            move || {
                Router::new()
                    .route("/test/crashy", axum::routing::post(crashy_on_axum))
                    .layer(Extension(axum_control))
            },
        )
        .await
    };
    let request = || post("/test/crashy", ALICE, "race", "{}");

    // The first attempt commits `first` and then dies: its request is dropped, so its
    // lease is never released and must run out.
    let first = app.call(request());
    let died = select(first, Box::pin(control.gate.reached())).await;
    assert!(
        matches!(died, futures_util::future::Either::Right(_)),
        "the first attempt is held"
    );
    drop(died);
    tokio::time::sleep(PAST_LEASE).await;

    let replies: Vec<Reply> = join_all((0..RETRIES).map(|_| app.call(request()))).await;

    let originals: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status == 201 && !r.replayed())
        .collect();
    assert_eq!(originals.len(), 1, "exactly one retry ran: {replies:#?}");
    let original = originals[0];
    assert!(
        original.body.ends_with(b"by attempt 2"),
        "{:?}",
        original.body
    );
    let (mut conflicts, mut replays) = (0, 0);
    for reply in &replies {
        if std::ptr::eq(reply, original) {
            continue;
        }
        if reply.status == 409 {
            reply.assert_idem_problem(409, "request-in-progress");
            assert_eq!(reply.header("retry-after"), Some("1"));
            conflicts += 1;
        } else {
            reply.assert_replay_of(original);
            replays += 1;
        }
    }
    assert_eq!(conflicts + replays, RETRIES - 1);
    assert_eq!(
        control.attempts.load(Ordering::SeqCst),
        2,
        "the handler ran for the first attempt and one retry only"
    );
    assert_eq!(
        *control.resumed_from.lock().unwrap(),
        [Some("first".to_owned())],
        "the retry resumed after the committed phase"
    );
    assert_eq!(
        effects(&env.pool).await,
        [(1, "first".to_owned()), (2, "second".to_owned())]
    );
    assert_eq!(recorded_phases(&env.pool, "race").await.len(), 2);

    let replayed = app.call(request()).await;
    replayed.assert_replay_of(original);
    eprintln!("{RETRIES} racing retries: 1 took over, {conflicts} got 409, {replays} replayed");
}

support::both_frameworks!(
    #[actix_web::test]
    of_many_retries_after_the_lease_exactly_one_takes_over,
);
