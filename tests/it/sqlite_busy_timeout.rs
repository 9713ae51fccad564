//! On SQLite a request waits `claim_wait` for the database's write lock, not the
//! connection's busy timeout, and gives every connection its own timeout back, whether it
//! got the lock or not: the application's own statements on the pool keep waiting as long
//! as it configured (idem-testkit's pools: 30 s).

use crate::support;

use std::time::Duration;

use actix_web::web;
use futures_util::future::join;
use sqlx::{Sqlite, SqlitePool};
use support::held::{self, Gate};
use support::{ALICE, BOB, Env, order_json, post, post_order};

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

async fn a_duplicate_that_outwaits_the_lock_after_its_key_completed_is_answered_the_replay() {
    let env = Env::<Sqlite>::open().await;
    let gate = web::Data::new(Gate::default());
    // Long enough that the duplicate outwaits the first request on any machine; what it
    // cannot outwait is the writer below, which holds the lock until it is answered.
    let idem = env.idem().claim_wait(Duration::from_secs(3));
    let app = held::app(&idem, &gate).await;
    let tea = order_json("tea", 1, 100);

    // The first request holds its key and the write lock at the gate; the duplicate reads
    // no committed key, so it waits for the write lock.
    let first = async {
        let first = app.call(post("/test/held", ALICE, "same", &tea)).await;
        // The moment the first has committed, another writer takes the lock and keeps it
        // until the duplicate is answered: the duplicate's wait runs out after its key
        // was completed.
        let mut writer = env.pool.acquire().await.expect("a connection");
        sqlx::raw_sql("BEGIN IMMEDIATE")
            .execute(&mut *writer)
            .await
            .expect("the test's writer gets the lock");
        (first, writer)
    };
    let duplicate = async {
        gate.reached().await;
        let duplicate = app.call(post("/test/held", ALICE, "same", &tea));
        let open = async {
            // Lets the duplicate read the key and start waiting for the lock (were it
            // not waiting yet, it would read the completed key: a replay all the same).
            tokio::time::sleep(Duration::from_millis(300)).await;
            gate.open();
        };
        join(duplicate, open).await.0
    };
    let ((first, mut writer), duplicate) = join(first, duplicate).await;
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut *writer)
        .await
        .expect("the writer rolls back");

    assert_eq!((first.status, &first.body[..]), (201, &b"held"[..]));
    // Its key was completed when its wait ran out: nothing is left to be busy about.
    duplicate.assert_replay_of(&first);
    assert_eq!(env.orders_of(ALICE).await, 1);
}

support::both_frameworks!(
    #[actix_web::test]
    every_connection_keeps_its_busy_timeout_after_requests_that_got_the_lock_or_not,
    #[actix_web::test]
    a_duplicate_that_outwaits_the_lock_after_its_key_completed_is_answered_the_replay,
);
