//! The longest retention the attribute accepts, `"100000y"`, fits in both databases'
//! timestamps: a key kept that long is claimed, stored with that retention and replayed.
//! (A longer one is a compile error: tests/ui/fail/retention_too_long.rs.)

mod support;

use actix_web::{HttpResponse, web};
use support::app::Account;
use support::{ALICE, Env, TestBackend, post};

/// 100,000 years of 365.25 days, as humantime reads `y`.
const MAX_RETENTION_SECS: i64 = 100_000 * 31_557_600;

#[idem::idempotent(scope = account, retention = "100000y")]
async fn keep_longest<DB: TestBackend>(account: Account, tx: idem::Tx<'_, DB>) -> HttpResponse {
    let _ = (account, &mut *tx);
    HttpResponse::Ok().body("kept")
}

async fn the_longest_retention_is_stored_and_replayed<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service_with(&env.idem(), |cfg| {
        cfg.route("/test/longest", web::post().to(keep_longest::<DB>));
    })
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

support::actix_only_tests!(the_longest_retention_is_stored_and_replayed);
