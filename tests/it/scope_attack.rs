//! A stored answer is replayed to every request with the same scope, key and body, without
//! running the handler: the scope decides who may see it. Scoped by the account in the
//! path, with authorization in the handler's body, another caller who learns a key and
//! its body reads the owner's answer and can squat the owner's key; scoped by the
//! authenticated caller, neither works. (`web::Path` alone does not compile as a scope;
//! `idem::UnverifiedScope` spells the first design out where it is chosen.)

use crate::support;

use actix_web::{HttpResponse, web};
use support::app::Account;
use support::{ALICE, BOB, Env, TestBackend, by_database, post};

/// Authorization in the body: the caller must be the account in the path.
fn authorize(caller: Account, owner: i64) -> Option<HttpResponse> {
    (caller.id() != owner).then(|| HttpResponse::Forbidden().body("not your account"))
}

/// The design the docs warn about: scoped by the path, authorized in the body.
#[idem::idempotent(scope = owner)]
async fn by_path<DB: idem::Backend>(
    owner: idem::UnverifiedScope<web::Path<i64>>,
    caller: Account,
    _tx: idem::Tx<'_, DB>,
) -> HttpResponse {
    let owner = owner.into_inner().into_inner();
    if let Some(refused) = authorize(caller, owner) {
        return refused;
    }
    HttpResponse::Created().body(format!("transfer for {owner}, secret reference 42"))
}

/// Scoped by the authenticated caller (the example's `Account`, its stand-in for a
/// verified session), authorized the same way.
#[idem::idempotent(scope = caller)]
async fn by_caller<DB: idem::Backend>(
    owner: web::Path<i64>,
    caller: Account,
    _tx: idem::Tx<'_, DB>,
) -> HttpResponse {
    let owner = owner.into_inner();
    if let Some(refused) = authorize(caller, owner) {
        return refused;
    }
    HttpResponse::Created().body(format!("transfer for {owner}, secret reference 42"))
}

/// `authorize` and the answer of both handlers, as the axum twins give them.
fn answer_on_axum(caller: Account, owner: i64) -> (axum::http::StatusCode, String) {
    use axum::http::StatusCode;

    if caller.id() != owner {
        return (StatusCode::FORBIDDEN, "not your account".to_owned());
    }
    (
        StatusCode::CREATED,
        format!("transfer for {owner}, secret reference 42"),
    )
}

/// `by_path` and `by_caller` on axum, once per database.
macro_rules! axum_twins {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::{Account, answer_on_axum};
            use axum::extract::Path;

            #[idem::axum::idempotent(scope = owner)]
            pub(super) async fn by_path(
                owner: idem::UnverifiedScope<Path<i64>>,
                caller: Account,
                _tx: idem::Tx<'_, $db>,
            ) -> (axum::http::StatusCode, String) {
                let Path(owner) = owner.into_inner();
                answer_on_axum(caller, owner)
            }

            #[idem::axum::idempotent(scope = caller)]
            pub(super) async fn by_caller(
                Path(owner): Path<i64>,
                caller: Account,
                _tx: idem::Tx<'_, $db>,
            ) -> (axum::http::StatusCode, String) {
                answer_on_axum(caller, owner)
            }
        }
    };
}

axum_twins!(on_postgres, sqlx::Postgres);
axum_twins!(on_sqlite, sqlx::Sqlite);

async fn app<DB: TestBackend>(env: &Env<DB>) -> support::TestApp {
    support::service_with_twin(
        &env.idem(),
        |cfg| {
            cfg.route("/by-path/{owner}/transfers", web::post().to(by_path::<DB>))
                .route(
                    "/by-caller/{owner}/transfers",
                    web::post().to(by_caller::<DB>),
                );
        },
        || {
            use axum::routing::post;
            by_database::<DB, _>(
                || {
                    axum::Router::new()
                        .route("/by-path/{owner}/transfers", post(on_postgres::by_path))
                        .route("/by-caller/{owner}/transfers", post(on_postgres::by_caller))
                },
                || {
                    axum::Router::new()
                        .route("/by-path/{owner}/transfers", post(on_sqlite::by_path))
                        .route("/by-caller/{owner}/transfers", post(on_sqlite::by_caller))
                },
            )
        },
    )
    .await
}

const BODY: &str = r#"{"to":"DE89370400440532013000","cents":5000}"#;

/// The hazard, pinned so the docs stay true: with the path as scope, Bob gets Alice's
/// stored answer, and Bob's 403 squats a key Alice has not used yet.
async fn a_path_scope_leaks_and_can_be_squatted<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = app(&env).await;
    let uri = format!("/by-path/{ALICE}/transfers");
    let alice = app.call(post(&uri, ALICE, "t-1", BODY)).await;
    assert_eq!(alice.status, 201);
    let bob = app.call(post(&uri, BOB, "t-1", BODY)).await;
    assert_eq!(bob.status, 201, "Bob is given Alice's answer");
    assert!(bob.replayed());
    assert_eq!(bob.body, alice.body);

    let squat = app.call(post(&uri, BOB, "t-2", BODY)).await;
    assert_eq!(squat.status, 403);
    let later = app.call(post(&uri, ALICE, "t-2", BODY)).await;
    assert_eq!(later.status, 403, "Alice gets Bob's stored refusal");
    assert!(later.replayed());
}

/// With the authenticated caller as scope, Bob's requests are his own: he never sees
/// Alice's answer, and his refusals never reach her.
async fn an_authenticated_scope_stops_both<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = app(&env).await;
    let uri = format!("/by-caller/{ALICE}/transfers");
    let alice = app.call(post(&uri, ALICE, "t-1", BODY)).await;
    assert_eq!(alice.status, 201);
    let bob = app.call(post(&uri, BOB, "t-1", BODY)).await;
    assert_eq!(
        bob.status, 403,
        "Bob's request ran as Bob's: {:?}",
        bob.body
    );
    assert!(!bob.replayed());
    assert!(!String::from_utf8_lossy(&bob.body).contains("secret"));

    let squat = app.call(post(&uri, BOB, "t-2", BODY)).await;
    assert_eq!(squat.status, 403);
    let later = app.call(post(&uri, ALICE, "t-2", BODY)).await;
    assert_eq!(later.status, 201, "Alice's key is hers");
    assert!(!later.replayed());
    let again = app.call(post(&uri, ALICE, "t-1", BODY)).await;
    assert!(again.replayed());
    assert_eq!(again.body, alice.body);
}

support::backend_tests!(
    a_path_scope_leaks_and_can_be_squatted,
    an_authenticated_scope_stops_both,
);
