//! What idem does with the transaction around the handler: the handler's statements run
//! with the application's lock timeout, a failed statement is handled without losing or
//! inventing data, and a handler that ends the transaction itself is caught.
//!
//! Every test runs on both frameworks; those about the lock timeout and the transaction a
//! failed statement aborts are PostgreSQL's (SQLite has no lock timeout and does not
//! abort), the others run on both databases.

use crate::support;

use std::future::Future;

use actix_web::{HttpResponse, post, web};
use sqlx::{AssertSqlSafe, Pool};
use support::app::Account;
use support::{ALICE, Env, TestApp, TestBackend, by_database, post};

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
#[idem::idempotent(scope = account)]
async fn claim_name<DB: Statements>(
    account: Account,
    tx: idem::Tx<'_, DB>,
    query: web::Query<Vec<(String, String)>>,
) -> HttpResponse {
    match insert_name(&mut tx, "taken", account).await {
        Ok(()) => HttpResponse::Created().body("yours"),
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

/// Inserts `name` for `account` in the handler's transaction. The id is an integer, so
/// it is written into the statement: a bind would need per-database bounds.
async fn insert_name<DB: Statements>(
    tx: &mut idem::Tx<'_, DB>,
    name: &str,
    account: Account,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "INSERT INTO names (name, account_id) VALUES ('{name}', {})",
        account.id()
    );
    DB::run_in(tx, &sql).await
}

/// Inserts a name, then ends idem's transaction with `how` (`COMMIT` or `ROLLBACK`) as a
/// raw statement, which handlers must never do.
async fn end_transaction_with<DB: Statements>(
    tx: &mut idem::Tx<'_, DB>,
    account: Account,
    how: &str,
) {
    insert_name(tx, "mine", account).await.expect("insert");
    let statement = if how.starts_with("commit") {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    DB::run_in(tx, statement).await.expect("end");
}

/// The answer of `end_transaction`: `commit-large` answers a body above the size idem
/// stages before storing it (64 KiB), the others a short one.
fn end_transaction_answer(how: &str) -> String {
    if how == "commit-large" {
        "large answer ".repeat(8_000)
    } else {
        "done".to_owned()
    }
}

/// Ends idem's transaction with a raw statement, which handlers must never do.
#[idem::idempotent(scope = account)]
async fn end_transaction<DB: Statements>(
    account: Account,
    how: web::Path<String>,
    tx: idem::Tx<'_, DB>,
) -> HttpResponse {
    end_transaction_with(&mut tx, account, &how).await;
    HttpResponse::Created().body(end_transaction_answer(&how))
}

/// Reads no body at all.
#[idem::idempotent(scope = account)]
async fn no_body<DB: TestBackend>(account: Account, tx: idem::Tx<'_, DB>) -> HttpResponse {
    let _ = (account, &mut *tx);
    HttpResponse::Accepted().body("accepted")
}

/// `lock_timeout` on axum (PostgreSQL's, so one).
#[idem::axum::idempotent(scope = account)]
async fn lock_timeout_on_axum(account: Account, tx: idem::Tx<'_, sqlx::Postgres>) -> String {
    let _ = account;
    sqlx::query_scalar("SHOW lock_timeout")
        .fetch_one(&mut *tx)
        .await
        .expect("SHOW works")
}

/// `claim_name`, `end_transaction` and `no_body` on axum, once per database.
macro_rules! axum_twins {
    ($module:ident, $db:ty) => {
        mod $module {
            use axum::extract::{Path, Query};
            use axum::http::StatusCode;

            use super::{Account, end_transaction_answer, end_transaction_with, insert_name};

            #[idem::axum::idempotent(scope = account)]
            pub(super) async fn claim_name(
                account: Account,
                tx: idem::Tx<'_, $db>,
                Query(query): Query<Vec<(String, String)>>,
            ) -> (StatusCode, &'static str) {
                match insert_name(&mut tx, "taken", account).await {
                    Ok(()) => (StatusCode::CREATED, "yours"),
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
                tx: idem::Tx<'_, $db>,
            ) -> (StatusCode, String) {
                end_transaction_with(&mut tx, account, &how).await;
                (StatusCode::CREATED, end_transaction_answer(&how))
            }

            #[idem::axum::idempotent(scope = account)]
            pub(super) async fn no_body(
                account: Account,
                tx: idem::Tx<'_, $db>,
            ) -> (StatusCode, &'static str) {
                let _ = (account, &mut *tx);
                (StatusCode::ACCEPTED, "accepted")
            }

            /// The routes the actix app gives the same handlers.
            pub(super) fn routes() -> axum::Router {
                use axum::routing::post;
                axum::Router::new()
                    .route("/test/claim-name", post(claim_name))
                    .route("/test/end-transaction/{how}", post(end_transaction))
                    .route("/test/no-body", post(no_body))
            }
        }
    };
}

axum_twins!(on_postgres, sqlx::Postgres);
axum_twins!(on_sqlite, sqlx::Sqlite);

async fn app<DB: Statements>(env: &Env<DB>) -> TestApp {
    app_with(env, env.idem()).await
}

/// The test application with `idem` (the default's settings changed below).
async fn app_with<DB: Statements>(env: &Env<DB>, idem: idem::Idem<DB>) -> TestApp {
    DB::run(
        &env.pool,
        "CREATE TABLE names (name text PRIMARY KEY, account_id bigint NOT NULL)",
    )
    .await;
    // Here a 409 is the final "name taken", not the default's transient "try again".
    let idem = idem.transient_statuses([
        actix_web::http::StatusCode::REQUEST_TIMEOUT,
        actix_web::http::StatusCode::TOO_MANY_REQUESTS,
    ]);
    support::service_with_twin(
        &idem,
        |cfg| {
            // PostgreSQL's only; never called on SQLite.
            cfg.service(lock_timeout)
                .route("/test/claim-name", web::post().to(claim_name::<DB>))
                .route(
                    "/test/end-transaction/{how}",
                    web::post().to(end_transaction::<DB>),
                )
                .route("/test/no-body", web::post().to(no_body::<DB>));
        },
        || {
            by_database::<DB, _>(
                || {
                    on_postgres::routes().route(
                        "/test/lock-timeout",
                        axum::routing::post(lock_timeout_on_axum),
                    )
                },
                on_sqlite::routes,
            )
        },
    )
    .await
}

/// Statements that return no rows, on either database: a generic `execute` would need
/// sqlx's executor bound on every handler and test.
trait Statements: TestBackend {
    /// Runs `sql` on `pool`.
    fn run(pool: &Pool<Self>, sql: &str) -> impl Future<Output = ()>;

    /// Runs `sql` in the handler's transaction.
    fn run_in(
        tx: &mut idem::Tx<'_, Self>,
        sql: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>>;
}

macro_rules! statements {
    ($db:ty) => {
        impl Statements for $db {
            async fn run(pool: &Pool<Self>, sql: &str) {
                sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
                    .execute(pool)
                    .await
                    .unwrap_or_else(|error| panic!("{sql}: {error}"));
            }

            async fn run_in(tx: &mut idem::Tx<'_, Self>, sql: &str) -> Result<(), sqlx::Error> {
                sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
                    .execute(&mut **tx)
                    .await
                    .map(drop)
            }
        }
    };
}

statements!(sqlx::Postgres);
statements!(sqlx::Sqlite);

async fn names<DB: TestBackend>(env: &Env<DB>) -> Vec<String> {
    DB::texts(&env.pool, "SELECT name FROM names ORDER BY name").await
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

async fn a_4xx_answered_after_a_failed_statement_is_stored_and_replayed<DB: Statements>() {
    let env = Env::<DB>::open().await;
    let app = app(&env).await;
    DB::run(&env.pool, "INSERT INTO names VALUES ('taken', 1)").await;

    let first = app.call(post("/test/claim-name", ALICE, "n-1", "")).await;
    assert_eq!(
        (first.status, &first.body[..]),
        (409, &b"the name is taken"[..])
    );
    assert!(!first.replayed());

    // The name is free now, but the key's outcome was the 409: retries see it.
    DB::run(&env.pool, "DELETE FROM names").await;
    let again = app.call(post("/test/claim-name", ALICE, "n-1", "")).await;
    again.assert_replay_of(&first);
    assert!(names(&env).await.is_empty(), "a replay runs nothing");
    assert_eq!(env.key_rows().await.len(), 1);
}

/// With encrypted storage the 4xx is sealed too. On PostgreSQL it is stored by a claim of
/// its own (the failed statement aborted the first, which rolled back), which begins
/// another life of the key: the answer is sealed to that one. SQLite's transaction
/// survives the failed statement, and stores it in the first.
async fn a_4xx_answered_after_a_failed_statement_is_sealed_and_replayed<DB: Statements>() {
    let env = Env::<DB>::open().await;
    let keyring = idem::encryption::Keyring::new("k1", [0x33; 32]);
    let app = app_with(&env, env.idem().encrypt_with(keyring)).await;
    DB::run(&env.pool, "INSERT INTO names VALUES ('taken', 1)").await;

    let first = app
        .call(post("/test/claim-name", ALICE, "n-sealed", ""))
        .await;
    assert_eq!(first.status, 409);
    let in_clear = by_database::<DB, _>(
        || {
            "SELECT count(*) FROM idem_keys WHERE idem_key = 'n-sealed' \
            AND position('taken'::bytea IN response_body) > 0"
        },
        || {
            "SELECT count(*) FROM idem_keys WHERE idem_key = 'n-sealed' \
            AND instr(response_body, CAST('taken' AS BLOB)) > 0"
        },
    );
    assert_eq!(
        DB::scalar(&env.pool, in_clear).await,
        0,
        "the answer is sealed"
    );
    assert_eq!(env.keys().await, 1, "the answer is stored");
    app.call(post("/test/claim-name", ALICE, "n-sealed", ""))
        .await
        .assert_replay_of(&first);
}

async fn a_success_claimed_after_a_failed_statement_is_rolled_back() {
    let env = Env::new().await;
    type DB = sqlx::Postgres;
    let app = app(&env).await;
    DB::run(&env.pool, "INSERT INTO names VALUES ('taken', 1)").await;

    let reply = app
        .call(post("/test/claim-name?pretend=1", ALICE, "n-2", ""))
        .await;
    reply.assert_idem_problem(500, "transaction-aborted");
    assert_eq!(env.keys().await, 0, "no key: the request may be retried");

    DB::run(&env.pool, "DELETE FROM names").await;
    let retry = app
        .call(post("/test/claim-name?pretend=1", ALICE, "n-2", ""))
        .await;
    assert_eq!((retry.status, &retry.body[..]), (201, &b"yours"[..]));
    assert_eq!(names(&env).await, ["taken"]);
}

async fn a_handler_that_rolls_back_itself_saves_nothing<DB: Statements>() {
    let env = Env::<DB>::open().await;
    let app = app(&env).await;
    let reply = app
        .call(post("/test/end-transaction/rollback", ALICE, "e-1", ""))
        .await;
    reply.assert_idem_problem(500, "transaction-ended");
    assert!(names(&env).await.is_empty());
    assert_eq!(env.keys().await, 0);
}

/// The handler's `COMMIT` made its write durable; the completion after it is a statement
/// of its own, durable too, and idem's own commit finds no transaction (PostgreSQL warns,
/// SQLite refuses): the client gets the handler's answer, and the retry its replay.
async fn a_handler_that_commits_itself_still_gets_its_key_recorded<DB: Statements>() {
    let env = Env::<DB>::open().await;
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

/// A large answer is staged (`COPY` into `idem_staged_bodies`) before the completion takes
/// it. After the handler's own `COMMIT` the staging commits on its own, and a process that
/// stalls for longer than the staged rows' hour before the completion finds its row swept.
/// The trigger plays that sweep, between the two statements and only outside idem's
/// transaction (where the claim's marker is gone). The key must still get the body: a
/// completion without it would leave a completed key that answers 409 until its retention
/// ends.
async fn a_handler_that_commits_itself_keeps_its_large_answer_when_the_staged_body_is_swept() {
    let env = Env::new().await;
    let app = app(&env).await;
    sqlx::raw_sql(
        "CREATE FUNCTION sweep_at_once() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF coalesce(current_setting('idem.outer_lock_timeout', true), '') = '' THEN
                 DELETE FROM idem_staged_bodies WHERE scope = NEW.scope AND nonce = NEW.nonce;
             END IF;
             RETURN NULL;
         END $$;
         CREATE TRIGGER sweep_at_once AFTER INSERT ON idem_staged_bodies
             FOR EACH ROW EXECUTE FUNCTION sweep_at_once();",
    )
    .execute(&env.pool)
    .await
    .expect("the trigger that plays the sweep");
    let first = app
        .call(post("/test/end-transaction/commit-large", ALICE, "e-3", ""))
        .await;
    assert_eq!(first.status, 201);
    assert_eq!(
        first.body,
        end_transaction_answer("commit-large").as_bytes()
    );
    let again = app
        .call(post("/test/end-transaction/commit-large", ALICE, "e-3", ""))
        .await;
    again.assert_replay_of(&first);
    assert_eq!(names(&env).await, ["mine"]);
}

async fn an_empty_body_with_a_json_content_type_is_not_invalid_json<DB: Statements>() {
    let env = Env::<DB>::open().await;
    let app = app(&env).await;
    let request = || {
        post("/test/no-body", ALICE, "b-1", "").insert_header(("content-type", "application/json"))
    };
    let first = app.call(request()).await;
    assert_eq!(first.status, 202);
    app.call(request()).await.assert_replay_of(&first);
}

support::backend_tests!(
    a_4xx_answered_after_a_failed_statement_is_stored_and_replayed,
    a_4xx_answered_after_a_failed_statement_is_sealed_and_replayed,
    a_handler_that_rolls_back_itself_saves_nothing,
    an_empty_body_with_a_json_content_type_is_not_invalid_json,
    a_handler_that_commits_itself_still_gets_its_key_recorded,
);

// PostgreSQL's lock timeout and its transaction that a failed statement aborts.
support::both_frameworks!(
    #[actix_web::test]
    the_handler_runs_with_the_applications_lock_timeout_not_the_claims,
    #[actix_web::test]
    a_success_claimed_after_a_failed_statement_is_rolled_back,
    #[actix_web::test]
    a_handler_that_commits_itself_keeps_its_large_answer_when_the_staged_body_is_swept,
);
