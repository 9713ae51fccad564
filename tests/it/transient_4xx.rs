//! A transient answer of the handler (408, 409, 423, 425, 429 by default) is not the
//! key's outcome: it rolls back like a 5xx, so a retry with the same key runs the
//! request. Other 4xx are outcomes, stored and replayed, with their `Retry-After`.

use crate::support;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use support::app::{Account, AppError, NewOrder, Store};
use support::{ALICE, Env, TestApp, TestBackend, by_database, order_json, post};

/// The statuses the next requests answer with, after inserting their order; 201 once
/// the script runs out.
#[derive(Debug, Default)]
struct Script(Mutex<VecDeque<u16>>);

#[idem::idempotent(scope = account)]
async fn scripted<DB: Store>(
    account: Account,
    tx: idem::Tx<'_, DB>,
    order: web::Json<NewOrder>,
    script: web::Data<Script>,
) -> Result<HttpResponse, AppError> {
    DB::insert_order(&mut tx, account.id(), &order).await?;
    let next = script.0.lock().expect("not poisoned").pop_front();
    Ok(match next {
        Some(status) => HttpResponse::build(StatusCode::from_u16(status).expect("a status"))
            .insert_header(("retry-after", "7"))
            .body(format!("answered {status}")),
        None => HttpResponse::Created()
            .insert_header(("retry-after", "7"))
            .body("created"),
    })
}

/// The script's next status, 201 once it runs out, as the axum twins answer it.
fn next_on_axum(script: &Script) -> axum::response::Response {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;

    let next = script.0.lock().expect("not poisoned").pop_front();
    let (status, body) = match next {
        Some(status) => (
            StatusCode::from_u16(status).expect("a status"),
            format!("answered {status}"),
        ),
        None => (StatusCode::CREATED, "created".to_owned()),
    };
    (status, [("retry-after", "7")], body).into_response()
}

/// The next status of the phased script, without a `Retry-After`, on axum.
fn next_phased_on_axum(script: &Script) -> axum::response::Response {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;

    match script.0.lock().expect("not poisoned").pop_front() {
        Some(status) => (
            StatusCode::from_u16(status).expect("a status"),
            format!("answered {status}"),
        )
            .into_response(),
        None => (StatusCode::CREATED, "created").into_response(),
    }
}

/// `scripted` and `phased` on axum, once per database.
macro_rules! axum_twins {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::*;
            use axum::Extension;

            #[idem::axum::idempotent(scope = account)]
            pub(super) async fn scripted(
                account: Account,
                Extension(script): Extension<Arc<Script>>,
                tx: idem::Tx<'_, $db>,
                axum::Json(order): axum::Json<NewOrder>,
            ) -> Result<axum::response::Response, AppError> {
                <$db as Store>::insert_order(&mut tx, account.id(), &order).await?;
                Ok(next_on_axum(&script))
            }

            #[idem::axum::idempotent(scope = account, lease = "30s")]
            pub(super) async fn phased(
                account: Account,
                phases: idem::Phases<$db>,
                Extension(script): Extension<Arc<Script>>,
                Extension(runs): Extension<Arc<AtomicUsize>>,
            ) -> Result<axum::response::Response, idem::phased::PhaseError> {
                let _ = account;
                phases
                    .run("first", async |_tx| {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, idem::phased::PhaseError>(())
                    })
                    .await?;
                Ok(next_phased_on_axum(&script))
            }
        }
    };
}

axum_twins!(on_postgres, sqlx::Postgres);
axum_twins!(on_sqlite, sqlx::Sqlite);

async fn app<DB: TestBackend>(idem: &idem::Idem<DB>, script: &[u16]) -> TestApp {
    let script = web::Data::new(Script(Mutex::new(script.iter().copied().collect())));
    let shared = script.clone().into_inner();
    support::service_with_twin(
        idem,
        move |cfg| {
            cfg.app_data(script)
                .route("/test/scripted", web::post().to(scripted::<DB>));
        },
        move || {
            let scripted = by_database::<DB, _>(
                || axum::routing::post(on_postgres::scripted),
                || axum::routing::post(on_sqlite::scripted),
            );
            axum::Router::new()
                .route("/test/scripted", scripted)
                .layer(axum::Extension(shared))
        },
    )
    .await
}

fn request(key: &str) -> support::TestRequest {
    post("/test/scripted", ALICE, key, &order_json("tea", 1, 100))
}

async fn a_429_rolls_back_and_the_retry_runs<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = app(&env.idem(), &[429]).await;

    let throttled = app.call(request("k")).await;
    assert_eq!(
        (throttled.status, &throttled.body[..]),
        (429, &b"answered 429"[..])
    );
    assert!(!throttled.replayed());
    assert_eq!(throttled.header("retry-after"), Some("7"));
    assert_eq!(env.orders().await, 0, "the 429 left no business write");
    assert_eq!(env.keys().await, 0, "the key stays usable");

    let retry = app.call(request("k")).await;
    assert_eq!((retry.status, &retry.body[..]), (201, &b"created"[..]));
    assert!(!retry.replayed(), "the retry ran the handler");
    assert_eq!(env.orders().await, 1, "one effect");

    let again = app.call(request("k")).await;
    again.assert_replay_of(&retry);
    assert_eq!(env.orders().await, 1);
}

async fn every_default_transient_status_rolls_back<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = app(&env.idem(), &[408, 409, 423, 425, 429]).await;
    for status in [408, 409, 423, 425, 429] {
        let reply = app.call(request("k")).await;
        assert_eq!(reply.status, status);
        assert!(!reply.replayed());
    }
    assert_eq!((env.orders().await, env.keys().await), (0, 0));
    let done = app.call(request("k")).await;
    assert_eq!(done.status, 201);
    assert_eq!((env.orders().await, env.keys().await), (1, 1));
}

async fn transient_statuses_are_configurable<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    // 409 is this application's deterministic "name taken"; 418 its transient answer.
    let idem = env
        .idem()
        .transient_statuses([StatusCode::IM_A_TEAPOT, StatusCode::TOO_MANY_REQUESTS]);
    let app = app(&idem, &[418, 409]).await;

    let teapot = app.call(request("k")).await;
    assert_eq!(teapot.status, 418);
    assert_eq!((env.orders().await, env.keys().await), (0, 0));
    let conflict = app.call(request("k")).await;
    assert_eq!(conflict.status, 409);
    assert!(!conflict.replayed());
    app.call(request("k")).await.assert_replay_of(&conflict);
    assert_eq!((env.orders().await, env.keys().await), (1, 1));
}

async fn a_stored_422_or_404_still_replays_with_its_retry_after<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = app(&env.idem(), &[422, 404]).await;
    for (key, status) in [("a", 422), ("b", 404)] {
        let first = app.call(request(key)).await;
        assert_eq!(first.status, status);
        assert!(!first.replayed());
        let replay = app.call(request(key)).await;
        replay.assert_replay_of(&first);
        assert_eq!(
            replay.header("retry-after"),
            Some("7"),
            "Retry-After replayed"
        );
    }
    // Each stored answer committed what its handler wrote; the replays wrote nothing.
    assert_eq!((env.orders().await, env.keys().await), (2, 2));
}

/// The phased form: a phase commits, then the handler answers from the script.
#[idem::idempotent(scope = account, lease = "30s")]
async fn phased<DB: TestBackend>(
    account: Account,
    phases: idem::Phases<DB>,
    script: web::Data<Script>,
    runs: web::Data<AtomicUsize>,
) -> Result<HttpResponse, idem::phased::PhaseError> {
    let _ = account;
    phases
        .run("first", async |_tx| {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, idem::phased::PhaseError>(())
        })
        .await?;
    let next = script.0.lock().expect("not poisoned").pop_front();
    Ok(match next {
        Some(status) => HttpResponse::build(StatusCode::from_u16(status).expect("a status"))
            .body(format!("answered {status}")),
        None => HttpResponse::Created().body("created"),
    })
}

async fn a_phased_429_keeps_its_phases_and_frees_the_lease<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let script = web::Data::new(Script(Mutex::new([429].into_iter().collect())));
    let runs = web::Data::new(AtomicUsize::new(0));
    let app = {
        let (script, runs) = (script.clone(), runs.clone());
        let (shared_script, shared_runs) = (script.clone().into_inner(), runs.clone().into_inner());
        support::service_with_twin(
            &env.idem(),
            move |cfg| {
                cfg.app_data(script)
                    .app_data(runs)
                    .route("/test/phased", web::post().to(phased::<DB>));
            },
            move || {
                let phased = by_database::<DB, _>(
                    || axum::routing::post(on_postgres::phased),
                    || axum::routing::post(on_sqlite::phased),
                );
                axum::Router::new()
                    .route("/test/phased", phased)
                    .layer(axum::Extension(shared_script))
                    .layer(axum::Extension(shared_runs))
            },
        )
        .await
    };
    let request = || post("/test/phased", ALICE, "p", "{}");

    let throttled = app.call(request()).await;
    assert_eq!(throttled.status, 429);
    // Not the key's outcome: still in progress at its committed phase, the lease free,
    // so the retry takes over at once (no waiting out the 30 s lease).
    let (state, point, _, leased) = DB::key_state(&env.pool, "p").await;
    assert_eq!(
        (state.as_str(), point.as_str(), leased),
        ("started", "first", false)
    );

    let retry = app.call(request()).await;
    assert_eq!((retry.status, &retry.body[..]), (201, &b"created"[..]));
    assert!(!retry.replayed());
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the committed phase ran once"
    );
    app.call(request()).await.assert_replay_of(&retry);
}

support::backend_tests!(
    a_429_rolls_back_and_the_retry_runs,
    every_default_transient_status_rolls_back,
    transient_statuses_are_configurable,
    a_stored_422_or_404_still_replays_with_its_retry_after,
    a_phased_429_keeps_its_phases_and_frees_the_lease,
);
