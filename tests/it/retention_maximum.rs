//! The longest retention the attribute accepts, `"100000y"`, fits in both databases'
//! timestamps: a key kept that long is claimed, stored with that retention and replayed.
//! (A longer one is a compile error: idem-ui/tests/ui/fail/retention_too_long.rs.)

use crate::support;

use actix_web::{HttpResponse, web};
use support::app::Account;
use support::{ALICE, Env, TestBackend, by_database, post};

/// 100,000 years of 365.25 days, as humantime reads `y`.
const MAX_RETENTION_SECS: i64 = 100_000 * 31_557_600;

#[idem::idempotent(scope = account, retention = "100000y")]
async fn keep_longest<DB: TestBackend>(account: Account, tx: idem::Tx<'_, DB>) -> HttpResponse {
    let _ = (account, &mut *tx);
    HttpResponse::Ok().body("kept")
}

/// `keep_longest` on axum, once per database.
macro_rules! axum_keep_longest {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::Account;

            #[idem::axum::idempotent(scope = account, retention = "100000y")]
            pub(super) async fn keep_longest(
                account: Account,
                tx: idem::Tx<'_, $db>,
            ) -> &'static str {
                let _ = (account, &mut *tx);
                "kept"
            }
        }
    };
}

axum_keep_longest!(on_postgres, sqlx::Postgres);
axum_keep_longest!(on_sqlite, sqlx::Sqlite);

async fn the_longest_retention_is_stored_and_replayed<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service_with_twin(
        &env.idem(),
        |cfg| {
            cfg.route("/test/longest", web::post().to(keep_longest::<DB>));
        },
        || {
            let keep_longest = by_database::<DB, _>(
                || axum::routing::post(on_postgres::keep_longest),
                || axum::routing::post(on_sqlite::keep_longest),
            );
            axum::Router::new().route("/test/longest", keep_longest)
        },
    )
    .await;

    let first = app.call(post("/test/longest", ALICE, "k", "{}")).await;
    assert_eq!(
        first.status,
        200,
        "body: {}",
        String::from_utf8_lossy(&first.body)
    );
    assert_eq!(DB::retentions(&env.pool).await, [MAX_RETENTION_SECS]);
    app.call(post("/test/longest", ALICE, "k", "{}"))
        .await
        .assert_replay_of(&first);
    assert_eq!(env.keys().await, 1);
}

support::backend_tests!(the_longest_retention_is_stored_and_replayed);
