//! A staged body no completion will take (`store/postgres/staged.rs`): a handler that
//! commits idem's transaction itself makes the completion run outside a transaction, so
//! its `COPY` commits on its own, and if the completion's `UPDATE` then fails (here: a
//! trigger the test installs refuses it) or never runs (the process stops), the row
//! stays in `idem_staged_bodies`. The expiry sweep deletes such rows once they are an
//! hour old, and never a younger one, which a completion under way may still take.
//!
//! Not behind a transaction pooler: a handler that ends idem's transaction leaves idem's
//! statements after it outside any, which the guide's "Behind PgBouncer"
//! (`docs/guide/deployment.md`) rules out (the tests' names carry `_itself_`, which
//! `.ci/run` skips there).

use crate::large_support;
use crate::support;

use actix_web::{HttpResponse, web};
use idem::admin::Expiry;
use large_support::answer;
use sqlx::PgPool;
use support::app::Account;
use support::{ALICE, Env, post};

/// Above the staging threshold.
const LARGE: usize = 300_001;

/// Commits idem's transaction itself, which handlers must never do, then answers
/// `LARGE` bytes.
#[idem::idempotent(scope = account)]
async fn committing(account: Account, tx: idem::Tx<'_, sqlx::Postgres>) -> HttpResponse {
    let _ = account;
    sqlx::raw_sql("COMMIT")
        .execute(&mut *tx)
        .await
        .expect("COMMIT");
    HttpResponse::Ok().body(answer(LARGE))
}

async fn staged_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM idem_staged_bodies")
        .fetch_one(pool)
        .await
        .expect("the staging table")
}

#[actix_web::test]
async fn a_handler_that_commits_itself_leaves_no_staged_body() {
    let env = Env::new().await;
    let app = support::service_with(&env.idem(), |cfg| {
        cfg.route("/test/committing", web::post().to(committing));
    })
    .await;
    let first = app.call(post("/test/committing", ALICE, "k", "{}")).await;
    assert_eq!(first.status, 200);
    assert_eq!(staged_rows(&env.pool).await, 0, "taken by the UPDATE");
    let replay = app.call(post("/test/committing", ALICE, "k", "{}")).await;
    assert!(replay.replayed());
    assert_eq!(replay.body, answer(LARGE));
}

#[actix_web::test]
async fn the_sweep_deletes_what_a_handler_that_commits_itself_left_staged() {
    let env = Env::new().await;
    let app = support::service_with(&env.idem(), |cfg| {
        cfg.route("/test/committing", web::post().to(committing));
    })
    .await;
    sqlx::raw_sql(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'refused'; END $$;
         CREATE TRIGGER refuse BEFORE UPDATE ON idem_keys
             FOR EACH ROW EXECUTE FUNCTION refuse();",
    )
    .execute(&env.pool)
    .await
    .expect("install the trigger");
    for key in ["old", "young"] {
        let failed = app.call(post("/test/committing", ALICE, key, "{}")).await;
        failed.assert_idem_problem(503, "storage-unavailable");
    }
    assert_eq!(
        staged_rows(&env.pool).await,
        2,
        "both COPYs committed on their own"
    );
    // One of them as if it had been staged more than an hour ago.
    sqlx::raw_sql(
        "UPDATE idem_staged_bodies SET staged_at = now() - interval '61 minutes'
          WHERE nonce = (SELECT min(nonce) FROM idem_staged_bodies)",
    )
    .execute(&env.pool)
    .await
    .expect("age one row");

    let report = Expiry::new(env.served_pool.clone())
        .sweep_once()
        .await
        .expect("the sweep");
    assert_eq!(report.rows_deleted, 1, "the old row alone");
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM idem_staged_bodies WHERE staged_at > now() - interval '1 hour'",
    )
    .fetch_one(&env.pool)
    .await
    .expect("the young row");
    assert_eq!(left, 1, "the young row is kept");
    assert_eq!(staged_rows(&env.pool).await, 1);
}
