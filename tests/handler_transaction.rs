//! What idem does with the transaction around the handler: the handler's statements run
//! with the application's lock timeout, a failed statement is handled without losing or
//! inventing data, and a handler that ends the transaction itself is caught.
//!
//! PostgreSQL only: a lock timeout, a transaction that a failed statement aborts and a raw
//! `COMMIT` or `ROLLBACK` inside it are PostgreSQL's; each test runs on both frameworks.

mod support;

use actix_web::{HttpResponse, post, web};
use support::app::Account;
use support::{ALICE, Env, TestApp, post};

/// Answers with the `lock_timeout` its own statements run under.
#[post("/test/lock-timeout")]
#[idem::idempotent(scope = account)]
async fn lock_timeout(account: Account, tx: idem::Tx<'_, sqlx::Postgres>) -> HttpResponse {
    let _ = account;
    let value: String = sqlx::query_scalar("SHOW lock_timeout")
        .fetch_one(&mut *tx)
        .await
        .expect("SHOW works");
    HttpResponse::Ok().body(value)
}

/// Inserts a name; a taken name is a 409 the handler answers itself, or (with
/// `?pretend=1`) a success it should not claim.
#[post("/test/claim-name")]
#[idem::idempotent(scope = account)]
async fn claim_name(
    account: Account,
    tx: idem::Tx<'_, sqlx::Postgres>,
    query: web::Query<Vec<(String, String)>>,
) -> HttpResponse {
    let inserted = sqlx::query("INSERT INTO names (name, account_id) VALUES ('taken', $1)")
        .bind(account.id())
        .execute(&mut *tx)
        .await;
    match inserted {
        Ok(_) => HttpResponse::Created().body("yours"),
        Err(_) if !query.is_empty() => HttpResponse::Created().body("pretending it worked"),
        Err(error)
            if error
                .as_database_error()
                .is_some_and(|e| e.is_unique_violation()) =>
        {
            HttpResponse::Conflict().body("the name is taken")
        }
        Err(_) => HttpResponse::InternalServerError().finish(),
    }
}

/// Ends idem's transaction with a raw statement, which handlers must never do.
#[post("/test/end-transaction/{how}")]
#[idem::idempotent(scope = account)]
async fn end_transaction(
    account: Account,
    how: web::Path<String>,
    tx: idem::Tx<'_, sqlx::Postgres>,
) -> HttpResponse {
    sqlx::query("INSERT INTO names (name, account_id) VALUES ('mine', $1)")
        .bind(account.id())
        .execute(&mut *tx)
        .await
        .expect("insert");
    let statement = if how.as_str() == "commit" {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    sqlx::raw_sql(statement)
        .execute(&mut *tx)
        .await
        .expect("end");
    HttpResponse::Created().body("done")
}

/// Reads no body at all.
#[post("/test/no-body")]
#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
async fn no_body(account: Account) -> HttpResponse {
    let _ = account;
    HttpResponse::Accepted().body("accepted")
}

/// The four handlers on axum (PostgreSQL only, as above, so one of each).
mod on_axum_handlers {
    use axum::extract::{Path, Query};
    use axum::http::StatusCode;

    use super::Account;

    #[idem::axum::idempotent(scope = account)]
    pub(super) async fn lock_timeout(account: Account, tx: idem::Tx<'_, sqlx::Postgres>) -> String {
        let _ = account;
        sqlx::query_scalar("SHOW lock_timeout")
            .fetch_one(&mut *tx)
            .await
            .expect("SHOW works")
    }

    #[idem::axum::idempotent(scope = account)]
    pub(super) async fn claim_name(
        account: Account,
        tx: idem::Tx<'_, sqlx::Postgres>,
        Query(query): Query<Vec<(String, String)>>,
    ) -> (StatusCode, &'static str) {
        let inserted = sqlx::query("INSERT INTO names (name, account_id) VALUES ('taken', $1)")
            .bind(account.id())
            .execute(&mut *tx)
            .await;
        match inserted {
            Ok(_) => (StatusCode::CREATED, "yours"),
            Err(_) if !query.is_empty() => (StatusCode::CREATED, "pretending it worked"),
            Err(error)
                if error
                    .as_database_error()
                    .is_some_and(|e| e.is_unique_violation()) =>
            {
                (StatusCode::CONFLICT, "the name is taken")
            }
            Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, ""),
        }
    }

    #[idem::axum::idempotent(scope = account)]
    pub(super) async fn end_transaction(
        account: Account,
        Path(how): Path<String>,
        tx: idem::Tx<'_, sqlx::Postgres>,
    ) -> (StatusCode, &'static str) {
        sqlx::query("INSERT INTO names (name, account_id) VALUES ('mine', $1)")
            .bind(account.id())
            .execute(&mut *tx)
            .await
            .expect("insert");
        let statement = if how == "commit" {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        sqlx::raw_sql(statement)
            .execute(&mut *tx)
            .await
            .expect("end");
        (StatusCode::CREATED, "done")
    }

    #[idem::axum::idempotent(scope = account, backend = sqlx::Postgres)]
    pub(super) async fn no_body(account: Account) -> (StatusCode, &'static str) {
        let _ = account;
        (StatusCode::ACCEPTED, "accepted")
    }

    /// The routes of the actix handlers' `#[post]` attributes.
    pub(super) fn routes() -> axum::Router {
        use axum::routing::post;
        axum::Router::new()
            .route("/test/lock-timeout", post(lock_timeout))
            .route("/test/claim-name", post(claim_name))
            .route("/test/end-transaction/{how}", post(end_transaction))
            .route("/test/no-body", post(no_body))
    }
}

async fn app(env: &Env) -> TestApp {
    app_with(env, env.idem()).await
}

/// The test application with `idem` (the default's settings changed below).
async fn app_with(env: &Env, idem: idem::Idem<sqlx::Postgres>) -> TestApp {
    sqlx::query("CREATE TABLE names (name text PRIMARY KEY, account_id bigint NOT NULL)")
        .execute(&env.pool)
        .await
        .expect("create table");
    // Here a 409 is the final "name taken", not the default's transient "try again".
    let idem = idem.transient_statuses([
        actix_web::http::StatusCode::REQUEST_TIMEOUT,
        actix_web::http::StatusCode::TOO_MANY_REQUESTS,
    ]);
    support::service_with_twin(
        &idem,
        |cfg| {
            cfg.service(lock_timeout)
                .service(claim_name)
                .service(end_transaction)
                .service(no_body);
        },
        on_axum_handlers::routes,
    )
    .await
}

async fn names(env: &Env) -> Vec<String> {
    sqlx::query_scalar("SELECT name FROM names ORDER BY name")
        .fetch_all(&env.pool)
        .await
        .expect("names")
}

async fn the_handler_runs_with_the_applications_lock_timeout_not_the_claims() {
    let env = Env::new().await;
    let app = app(&env).await;
    let reply = app
        .call(post("/test/lock-timeout", ALICE, "lt-1", ""))
        .await;
    assert_eq!(reply.status, 200);
    // PostgreSQL's default; the claim's 1 s must not leak into business statements.
    assert_eq!(&reply.body[..], b"0");
}

async fn a_4xx_answered_after_a_failed_statement_is_stored_and_replayed() {
    let env = Env::new().await;
    let app = app(&env).await;
    sqlx::query("INSERT INTO names VALUES ('taken', 1)")
        .execute(&env.pool)
        .await
        .expect("take the name");

    let first = app.call(post("/test/claim-name", ALICE, "n-1", "")).await;
    assert_eq!(
        (first.status, &first.body[..]),
        (409, &b"the name is taken"[..])
    );
    assert!(!first.replayed());

    // The name is free now, but the key's outcome was the 409: retries see it.
    sqlx::query("DELETE FROM names")
        .execute(&env.pool)
        .await
        .expect("free the name");
    let again = app.call(post("/test/claim-name", ALICE, "n-1", "")).await;
    again.assert_replay_of(&first);
    assert!(names(&env).await.is_empty(), "a replay runs nothing");
    assert_eq!(env.key_rows().await.len(), 1);
}

/// With encrypted storage the 4xx is stored by a claim of its own (the first rolled
/// back), which begins another life of the key: the answer is sealed to that one.
async fn a_4xx_answered_after_a_failed_statement_is_sealed_and_replayed() {
    let env = Env::new().await;
    let keyring = idem::encryption::Keyring::new("k1", [0x33; 32]);
    let app = app_with(&env, env.idem().encrypt_with(keyring)).await;
    sqlx::query("INSERT INTO names VALUES ('taken', 1)")
        .execute(&env.pool)
        .await
        .expect("take the name");

    let first = app
        .call(post("/test/claim-name", ALICE, "n-sealed", ""))
        .await;
    assert_eq!(first.status, 409);
    let stored: Vec<u8> =
        sqlx::query_scalar("SELECT response_body FROM idem_keys WHERE idem_key = 'n-sealed'")
            .fetch_one(&env.pool)
            .await
            .expect("the stored answer");
    assert!(
        !stored.windows(5).any(|w| w == b"taken"),
        "the answer is sealed"
    );
    app.call(post("/test/claim-name", ALICE, "n-sealed", ""))
        .await
        .assert_replay_of(&first);
}

async fn a_success_claimed_after_a_failed_statement_is_rolled_back() {
    let env = Env::new().await;
    let app = app(&env).await;
    sqlx::query("INSERT INTO names VALUES ('taken', 1)")
        .execute(&env.pool)
        .await
        .expect("take the name");

    let reply = app
        .call(post("/test/claim-name?pretend=1", ALICE, "n-2", ""))
        .await;
    reply.assert_idem_problem(500, "transaction-aborted");
    assert_eq!(env.keys().await, 0, "no key: the request may be retried");

    sqlx::query("DELETE FROM names")
        .execute(&env.pool)
        .await
        .expect("free the name");
    let retry = app
        .call(post("/test/claim-name?pretend=1", ALICE, "n-2", ""))
        .await;
    assert_eq!((retry.status, &retry.body[..]), (201, &b"yours"[..]));
    assert_eq!(names(&env).await, ["taken"]);
}

async fn a_handler_that_rolls_back_itself_saves_nothing() {
    let env = Env::new().await;
    let app = app(&env).await;
    let reply = app
        .call(post("/test/end-transaction/rollback", ALICE, "e-1", ""))
        .await;
    reply.assert_idem_problem(500, "transaction-ended");
    assert!(names(&env).await.is_empty());
    assert_eq!(env.keys().await, 0);
}

async fn a_handler_that_commits_itself_still_gets_its_key_recorded() {
    let env = Env::new().await;
    let app = app(&env).await;
    let first = app
        .call(post("/test/end-transaction/commit", ALICE, "e-2", ""))
        .await;
    assert_eq!((first.status, &first.body[..]), (201, &b"done"[..]));
    // The write is durable and so is the key: a retry replays instead of inserting again.
    let again = app
        .call(post("/test/end-transaction/commit", ALICE, "e-2", ""))
        .await;
    again.assert_replay_of(&first);
    assert_eq!(names(&env).await, ["mine"]);
}

async fn an_empty_body_with_a_json_content_type_is_not_invalid_json() {
    let env = Env::new().await;
    let app = app(&env).await;
    let request = || {
        post("/test/no-body", ALICE, "b-1", "").insert_header(("content-type", "application/json"))
    };
    let first = app.call(request()).await;
    assert_eq!(first.status, 202);
    app.call(request()).await.assert_replay_of(&first);
}

support::both_frameworks!(
    #[actix_web::test]
    the_handler_runs_with_the_applications_lock_timeout_not_the_claims,
    #[actix_web::test]
    a_4xx_answered_after_a_failed_statement_is_stored_and_replayed,
    #[actix_web::test]
    a_4xx_answered_after_a_failed_statement_is_sealed_and_replayed,
    #[actix_web::test]
    a_success_claimed_after_a_failed_statement_is_rolled_back,
    #[actix_web::test]
    a_handler_that_rolls_back_itself_saves_nothing,
    #[actix_web::test]
    a_handler_that_commits_itself_still_gets_its_key_recorded,
    #[actix_web::test]
    an_empty_body_with_a_json_content_type_is_not_invalid_json,
);
