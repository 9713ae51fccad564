//! While an attempt holds its lease, a duplicate gets 409 `request-in-progress` with
//! `Retry-After: 1` at once (the claim committed, so nothing waits on a lock); a phase
//! that runs longer than the lease keeps duplicates out by extending it. Once the attempt
//! completes, duplicates replay its response.

use crate::phased_support;
use crate::support;

use std::sync::Arc;
use std::time::Instant;

use actix_web::web;
use axum::{Extension, Router};
use futures_util::future::join;
use idem::phased::PhaseError;
use phased_support::{Answer, Gate, LEASE};
use support::app::Account;
use support::{ALICE, Env, TestApp, TestBackend, by_database, post};

#[derive(Debug, Default)]
struct Control {
    gate: Gate,
}

/// Held between two phases until the test opens the gate.
async fn held<DB: idem::Backend>(
    phases: &mut idem::Phases<DB>,
    control: &Control,
) -> Result<Answer, PhaseError> {
    phases
        .run("first", async |_tx| Ok::<_, PhaseError>(()))
        .await?;
    control.gate.pass().await;
    phases
        .run("second", async |_tx| Ok::<_, PhaseError>(()))
        .await?;
    Ok(Answer::text(201, "done"))
}

/// One phase that works for 2.5 leases, extending its lease as it goes.
async fn long_phase<DB: idem::Backend>(
    phases: &mut idem::Phases<DB>,
) -> Result<Answer, PhaseError> {
    let lease = phases.lease();
    let steps: u32 = phases
        .run("long", async |_tx| {
            let step = lease.duration() / 4;
            for _ in 0..10 {
                tokio::time::sleep(step).await;
                lease.extend().await?;
            }
            Ok::<_, PhaseError>(10)
        })
        .await?;
    Ok(Answer::text(201, format!("{steps} steps")))
}

/// `POST /test/held` on actix-web.
#[idem::idempotent(scope = account, lease = "1s")]
async fn held_on_actix<DB: TestBackend>(
    account: Account,
    phases: idem::Phases<DB>,
    control: web::Data<Control>,
) -> Result<Answer, PhaseError> {
    let _ = account;
    held(&mut phases, &control).await
}

/// `POST /test/long-phase` on actix-web.
#[idem::idempotent(scope = account, lease = "1s")]
async fn long_phase_on_actix<DB: TestBackend>(
    account: Account,
    phases: idem::Phases<DB>,
) -> Result<Answer, PhaseError> {
    let _ = account;
    long_phase(&mut phases).await
}

/// The same routes on axum, once per database: idempotent axum handlers are not generic.
macro_rules! axum_routes {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::*;

            #[idem::axum::idempotent(scope = account, lease = "1s")]
            async fn held(
                account: Account,
                phases: idem::Phases<$db>,
                Extension(control): Extension<Arc<Control>>,
            ) -> Result<Answer, PhaseError> {
                let _ = account;
                super::held(&mut phases, &control).await
            }

            #[idem::axum::idempotent(scope = account, lease = "1s")]
            async fn long_phase(
                account: Account,
                phases: idem::Phases<$db>,
            ) -> Result<Answer, PhaseError> {
                let _ = account;
                super::long_phase(&mut phases).await
            }

            pub(super) fn routes() -> Router {
                Router::new()
                    .route("/test/held", axum::routing::post(held))
                    .route("/test/long-phase", axum::routing::post(long_phase))
            }
        }
    };
}

axum_routes!(axum_on_postgres, sqlx::Postgres);
axum_routes!(axum_on_sqlite, sqlx::Sqlite);

async fn app<DB: TestBackend>(env: &Env<DB>, control: &web::Data<Control>) -> TestApp {
    let actix_control = control.clone();
    let axum_control = control.clone().into_inner();
    support::service_with_twin(
        &env.idem(),
        move |cfg| {
            cfg.app_data(actix_control)
                .route("/test/held", web::post().to(held_on_actix::<DB>))
                .route(
                    "/test/long-phase",
                    web::post().to(long_phase_on_actix::<DB>),
                );
        },
        move || {
            by_database::<DB, _>(axum_on_postgres::routes, axum_on_sqlite::routes)
                .layer(Extension(axum_control))
        },
    )
    .await
}

fn assert_in_progress(reply: &support::Reply) {
    reply.assert_idem_problem(409, "request-in-progress");
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert!(!reply.replayed());
}

async fn a_duplicate_during_a_held_lease_gets_409_then_replays<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let control = web::Data::new(Control::default());
    let app = app(&env, &control).await;
    let request = || post("/test/held", ALICE, "held", "{}");

    let first = app.call(request());
    let duplicates = async {
        control.gate.reached().await;
        // The claim and the first phase are committed; the attempt holds its lease.
        let (state, point, _, leased) = DB::key_state(&env.pool, "held").await;
        assert_eq!(
            (state.as_str(), point.as_str(), leased),
            ("started", "first", true)
        );
        let duplicate = app.call(request()).await;
        // A different body is a different request, in progress or not.
        let other = app
            .call(post("/test/held", ALICE, "held", r#"{"x":1}"#))
            .await;
        control.gate.open();
        (duplicate, other)
    };
    let (first, (duplicate, other)) = join(first, duplicates).await;

    // Answered while the attempt was held, from the committed row with its live lease.
    assert_in_progress(&duplicate);
    let mismatch = other.assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(mismatch["mismatch"], "body");
    assert_eq!(first.status, 201);
    app.call(request()).await.assert_replay_of(&first);
}

async fn a_phase_longer_than_the_lease_extends_it_and_keeps_duplicates_out<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = app(&env, &web::Data::new(Control::default())).await;
    let request = || post("/test/long-phase", ALICE, "long", "{}");

    let started = Instant::now();
    let first = async {
        let reply = app.call(request()).await;
        (reply, started.elapsed())
    };
    let duplicates = async {
        let mut replies = Vec::new();
        // Past the lease as first claimed, twice over: still held, thanks to extensions.
        for after in [LEASE / 2, LEASE + LEASE / 2, LEASE * 2] {
            tokio::time::sleep_until((started + after).into()).await;
            replies.push((app.call(request()).await, started.elapsed()));
        }
        replies
    };
    let ((first, took), duplicates) = join(first, duplicates).await;

    assert_eq!(first.status, 201, "{:?}", first.body);
    assert_eq!(&first.body[..], b"10 steps");
    assert!(took > LEASE * 2, "the phase outlived its lease: {took:?}");
    for (reply, at) in &duplicates {
        assert!(*at < took, "sent while the phase ran");
        assert_in_progress(reply);
    }
    app.call(request()).await.assert_replay_of(&first);
}

support::backend_tests!(
    a_duplicate_during_a_held_lease_gets_409_then_replays,
    a_phase_longer_than_the_lease_extends_it_and_keeps_duplicates_out,
);
