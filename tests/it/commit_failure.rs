//! A COMMIT the database refuses (here a deferred foreign key, checked only at COMMIT)
//! rolled everything back: idem answers 503 saying nothing was saved, keeps no key, and a
//! retry runs the request again. (A COMMIT whose answer was lost, the connection dropping
//! mid-way, has an unknown outcome; that answer says so, and is not provoked here.)

use crate::support;

use actix_web::{HttpResponse, web};
use support::app::Account;
use support::{ALICE, Env, TestBackend, by_database, post};

/// Writes a child of a parent that does not exist; the deferred constraint lets the
/// statement through and fails the COMMIT.
#[idem::idempotent(scope = account)]
async fn orphan<DB: TestBackend>(account: Account, tx: idem::Tx<'_, DB>) -> HttpResponse
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    let _ = account;
    sqlx::raw_sql("INSERT INTO children (parent_id) VALUES (7)")
        .execute(&mut *tx)
        .await
        .expect("a deferred constraint is not checked before COMMIT");
    HttpResponse::Created().body("orphan")
}

/// `orphan` on axum, once per database.
macro_rules! axum_orphan {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::Account;

            #[idem::axum::idempotent(scope = account)]
            pub(super) async fn orphan(
                account: Account,
                tx: idem::Tx<'_, $db>,
            ) -> (axum::http::StatusCode, &'static str) {
                let _ = account;
                sqlx::raw_sql("INSERT INTO children (parent_id) VALUES (7)")
                    .execute(&mut *tx)
                    .await
                    .expect("a deferred constraint is not checked before COMMIT");
                (axum::http::StatusCode::CREATED, "orphan")
            }
        }
    };
}

axum_orphan!(on_postgres, sqlx::Postgres);
axum_orphan!(on_sqlite, sqlx::Sqlite);

async fn a_commit_refused_by_a_deferred_constraint_saves_nothing<DB: TestBackend>()
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    let env = Env::<DB>::open().await;
    sqlx::raw_sql(
        "CREATE TABLE parents (id bigint PRIMARY KEY);
         CREATE TABLE children (parent_id bigint NOT NULL
             REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED);",
    )
    .execute(&env.pool)
    .await
    .expect("create the tables");
    let app = support::service_with_twin(
        &env.idem(),
        |cfg| {
            cfg.route("/test/orphan", web::post().to(orphan::<DB>));
        },
        || {
            let orphan = by_database::<DB, _>(
                || axum::routing::post(on_postgres::orphan),
                || axum::routing::post(on_sqlite::orphan),
            );
            axum::Router::new().route("/test/orphan", orphan)
        },
    )
    .await;

    for _ in 0..2 {
        let reply = app.call(post("/test/orphan", ALICE, "orphan", "")).await;
        let problem = reply.assert_idem_problem(503, "storage-unavailable");
        let detail = problem["detail"].as_str().expect("a detail");
        assert!(detail.contains("nothing was saved"), "{detail}");
        assert!(!detail.contains("may or may not"), "{detail}");
        assert_eq!(reply.header("retry-after"), Some("1"));
        // Rolled back: no child, no key, so the retry ran the handler again.
        assert_eq!(
            DB::scalar(&env.pool, "SELECT count(*) FROM children").await,
            0
        );
        assert_eq!(env.keys().await, 0);
    }
}

support::backend_tests!(a_commit_refused_by_a_deferred_constraint_saves_nothing,);
