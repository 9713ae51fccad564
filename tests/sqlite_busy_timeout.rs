//! On SQLite a request waits `claim_wait` for the database's write lock, not the
//! connection's busy timeout, and gives every connection its own timeout back, whether it
//! got the lock or not: the application's own statements on the pool keep waiting as long
//! as it configured (idem-testkit's pools: 30 s).

mod support;

use std::time::Duration;

use sqlx::{Sqlite, SqlitePool};
use support::{ALICE, BOB, Env, order_json, post_order};

/// The busy timeout of idem-testkit's SQLite pools, in ms.
const POOL_BUSY_TIMEOUT_MS: i64 = 30_000;

/// `PRAGMA busy_timeout` of every connection the pool has open, each read on its own
/// connection (all of them held at once, so none is read twice).
async fn busy_timeouts(pool: &SqlitePool) -> Vec<i64> {
    let mut held = Vec::new();
    for _ in 0..pool.size() {
        held.push(pool.acquire().await.expect("a connection"));
    }
    let mut timeouts = Vec::new();
    for conn in &mut held {
        let timeout: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
            .fetch_one(&mut **conn)
            .await
            .expect("PRAGMA busy_timeout answers");
        timeouts.push(timeout);
    }
    timeouts
}

async fn every_connection_keeps_its_busy_timeout_after_requests_that_got_the_lock_or_not() {
    let env = Env::<Sqlite>::open().await;
    let idem = env.idem().claim_wait(Duration::from_millis(50));
    let app = support::service(&idem).await;
    let tea = order_json("tea", 1, 100);

    let first = app.call(post_order(ALICE, "first", &tea)).await;
    first.assert_created();
    app.call(post_order(ALICE, "first", &tea))
        .await
        .assert_replay_of(&first);

    // Another writer holds the lock past the claim's wait: the request gets no lock.
    let mut writer = env.pool.acquire().await.expect("a connection");
    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut *writer)
        .await
        .expect("the write lock is free");
    app.call(post_order(BOB, "busy", &tea))
        .await
        .assert_idem_problem(503, "storage-busy");
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut *writer)
        .await
        .expect("the writer rolls back");
    drop(writer);

    let timeouts = busy_timeouts(&env.served_pool).await;
    assert!(!timeouts.is_empty());
    assert!(
        timeouts.iter().all(|&ms| ms == POOL_BUSY_TIMEOUT_MS),
        "busy timeouts of the pool's connections: {timeouts:?}"
    );
    // The busy request stored nothing: its retry runs.
    app.call(post_order(BOB, "busy", &tea))
        .await
        .assert_created();
}

support::both_frameworks!(
    #[actix_web::test]
    every_connection_keeps_its_busy_timeout_after_requests_that_got_the_lock_or_not,
);
