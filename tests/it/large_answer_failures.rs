//! A large answer's `COPY` (`store/postgres/staged.rs`) that fails: cancelled by the
//! handler's `statement_timeout` or `lock_timeout` while another transaction holds the
//! staging table (the limit is set for that request alone, so the outcome does not
//! depend on how long a `COPY` takes), or refused by the server for a row it will not take after every byte
//! was sent. Either form: the single-transaction completion runs in the request's
//! transaction, the phased one in a transaction of its own. The request is answered with
//! a storage error, nothing is staged, the pool's connections work, and (for the single
//! form, where the failure rolls the handler back) a retry executes once and replays.

use crate::large_support;
use crate::support;

use actix_web::{HttpResponse, web};
use large_support::answer;
use sqlx::{Connection as _, PgPool};
use support::app::Account;
use support::{ALICE, Env, TestApp, post};

/// Above the staging threshold.
const LARGE: usize = 300_001;

/// Writes a row of `effects`, sets on its own transaction (which the completion's `COPY`
/// runs in) the limits the test put in `limits`, then answers `LARGE` bytes.
#[idem::idempotent(scope = account)]
async fn single(account: Account, tx: idem::Tx<'_, sqlx::Postgres>) -> HttpResponse {
    let _ = account;
    sqlx::raw_sql(
        "INSERT INTO effects DEFAULT VALUES;
         SELECT set_config(name, value, true) FROM limits",
    )
    .execute(&mut *tx)
    .await
    .expect("the effect");
    HttpResponse::Ok().body(answer(LARGE))
}

/// Writes a row of `effects` in a phase, then answers `LARGE` bytes.
#[idem::idempotent(scope = account, lease = "30s")]
async fn phased(
    account: Account,
    phases: idem::Phases<sqlx::Postgres>,
) -> Result<HttpResponse, idem::phased::PhaseError> {
    let _ = account;
    let body = large_support::phased_effect(&mut phases, LARGE).await?;
    Ok(HttpResponse::Ok().body(body))
}

async fn app(env: &Env) -> TestApp {
    sqlx::raw_sql(
        "CREATE TABLE effects (id bigserial PRIMARY KEY);
         CREATE TABLE limits (name text PRIMARY KEY, value text NOT NULL)",
    )
    .execute(&env.pool)
    .await
    .expect("the effects table");
    support::service_with(&env.idem(), |cfg| {
        cfg.route("/test/fails/single", web::post().to(single))
            .route("/test/fails/phased", web::post().to(phased));
    })
    .await
}

async fn scalar(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Holds every connection `pool` may open at once and runs a statement on each.
async fn assert_connections_work(pool: &PgPool) {
    let max = pool.options().get_max_connections();
    let mut held = Vec::new();
    for _ in 0..max {
        held.push(pool.acquire().await.expect("a connection"));
    }
    for (i, conn) in held.iter_mut().enumerate() {
        let expected = i as i64;
        let mut tx = conn.begin().await.expect("BEGIN");
        let got: i64 = sqlx::query_scalar("SELECT $1::int8")
            .bind(expected)
            .fetch_one(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        assert_eq!(got, expected, "connection {i} answered another statement");
        tx.commit().await.expect("COMMIT");
    }
}

/// Calls `path` with the handler's `limit` set to 50 ms while another transaction holds
/// the staging table: the limit cancels the `COPY` that waits for it. The limit goes
/// with the lock, so that no later request runs under it.
async fn with_the_table_locked(env: &Env, app: &TestApp, limit: &str, key: &str) -> support::Reply {
    sqlx::query("INSERT INTO limits VALUES ($1, '50')")
        .bind(limit)
        .execute(&env.pool)
        .await
        .expect("set the limit");
    let mut lock = env.pool.begin().await.expect("BEGIN");
    sqlx::raw_sql("LOCK TABLE idem_staged_bodies IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .expect("lock the staging table");
    let reply = app.call(post(PATH, ALICE, key, "{}")).await;
    lock.commit().await.expect("COMMIT");
    sqlx::raw_sql("DELETE FROM limits")
        .execute(&env.pool)
        .await
        .expect("lift the limit");
    reply
}

/// The single form's failed request kept nothing, and its retry runs once and replays.
async fn assert_retried_once(env: &Env, app: &TestApp, path: &str, key: &str) {
    assert_eq!(
        scalar(&env.pool, "SELECT count(*) FROM idem_staged_bodies").await,
        0
    );
    assert_eq!(env.keys().await, 0, "{path}: the key was not recorded");
    assert_eq!(scalar(&env.pool, "SELECT count(*) FROM effects").await, 0);
    assert_connections_work(&env.served_pool).await;
    let retry = app.call(post(path, ALICE, key, "{}")).await;
    assert_eq!(retry.status, 200, "{path}: the retry executes");
    assert!(!retry.replayed(), "{path}");
    assert_eq!(retry.body, answer(LARGE), "{path}");
    let replay = app.call(post(path, ALICE, key, "{}")).await;
    assert!(replay.replayed(), "{path}: then replays");
    assert_eq!(replay.body, answer(LARGE), "{path}");
    assert_eq!(scalar(&env.pool, "SELECT count(*) FROM effects").await, 1);
    assert_eq!(
        scalar(&env.pool, "SELECT count(*) FROM idem_staged_bodies").await,
        0
    );
}

/// The single form's route.
const PATH: &str = "/test/fails/single";

#[actix_web::test]
async fn a_copy_cancelled_by_the_statement_timeout_stores_nothing() {
    let env = Env::new().await;
    let app = app(&env).await;
    let failed = with_the_table_locked(&env, &app, "statement_timeout", "timed-out").await;
    failed.assert_idem_problem(503, "storage-unavailable");
    assert_retried_once(&env, &app, PATH, "timed-out").await;
}

#[actix_web::test]
async fn a_copy_past_the_lock_timeout_stores_nothing() {
    let env = Env::new().await;
    let app = app(&env).await;
    let failed = with_the_table_locked(&env, &app, "lock_timeout", "locked-out").await;
    failed.assert_idem_problem(503, "storage-unavailable");
    assert_retried_once(&env, &app, PATH, "locked-out").await;
}

/// The server refuses the staged row only once all of it has arrived, while sqlx's
/// `finish` waits: a constraint the test adds to the staging table.
async fn refuse_large_rows(pool: &PgPool) -> impl AsyncFnOnce() {
    sqlx::raw_sql(
        "ALTER TABLE idem_staged_bodies
             ADD CONSTRAINT refused CHECK (length(body) < 100000) NOT VALID",
    )
    .execute(pool)
    .await
    .expect("add the constraint");
    async move || {
        sqlx::raw_sql("ALTER TABLE idem_staged_bodies DROP CONSTRAINT refused")
            .execute(pool)
            .await
            .expect("drop the constraint");
    }
}

#[actix_web::test]
async fn a_copy_the_server_refuses_stores_nothing() {
    let env = Env::new().await;
    let app = app(&env).await;
    let allow = refuse_large_rows(&env.pool).await;
    let failed = app.call(post(PATH, ALICE, "refused", "{}")).await;
    failed.assert_idem_problem(503, "storage-unavailable");
    allow().await;
    assert_retried_once(&env, &app, PATH, "refused").await;
}

#[actix_web::test]
async fn a_phased_copy_the_server_refuses_stores_nothing() {
    let env = Env::new().await;
    let app = app(&env).await;
    let path = "/test/fails/phased";
    let allow = refuse_large_rows(&env.pool).await;
    let failed = app.call(post(path, ALICE, "refused", "{}")).await;
    failed.assert_idem_problem(503, "storage-unavailable");
    allow().await;
    assert_eq!(
        scalar(&env.pool, "SELECT count(*) FROM idem_staged_bodies").await,
        0
    );
    assert_eq!(
        scalar(
            &env.pool,
            "SELECT count(*) FROM idem_keys WHERE state = 'completed'"
        )
        .await,
        0,
        "no answer was recorded"
    );
    assert_eq!(
        scalar(&env.pool, "SELECT count(*) FROM effects").await,
        1,
        "the phase committed before"
    );
    assert_connections_work(&env.served_pool).await;
}
