//! On SQLite a request reads its key (so that a replay need not wait for the write lock)
//! and, when it must claim the key, opens its transaction on the same pool connection: a
//! first execution takes one connection from the pool, as a replay does, not one for the
//! read and another for the write.
//!
//! What the pool sees is the observable part: sqlx calls `after_connect` for every
//! connection it opens for an acquisition and `before_acquire` for every idle one it hands
//! out, both before the acquisition returns, so their sum counts acquisitions exactly by
//! the time a response is back. (A pool of one connection would not show the difference:
//! the read's connection goes back to the pool before the write asks for one.)

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_testkit::TestSqlite;
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use support::{ALICE, order_json, post_order};

/// A pool like idem-testkit's (WAL, a 30 s busy timeout) that counts its acquisitions.
async fn counting_pool(db: &TestSqlite, acquisitions: &Arc<AtomicUsize>) -> SqlitePool {
    let options = SqliteConnectOptions::new()
        .filename(db.path())
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    let opened = Arc::clone(acquisitions);
    let reused = Arc::clone(acquisitions);
    SqlitePoolOptions::new()
        .max_connections(4)
        .after_connect(move |_, _| {
            opened.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        })
        .before_acquire(move |_, _| {
            reused.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(true) })
        })
        .connect_with(options)
        .await
        .expect("the SQLite test database opens")
}

async fn a_first_execution_reads_and_writes_its_key_on_one_pool_connection() {
    let db = TestSqlite::new();
    let acquisitions = Arc::new(AtomicUsize::new(0));
    let pool = counting_pool(&db, &acquisitions).await;
    support::app::setup(&pool)
        .await
        .expect("migrations apply to a fresh database");
    let app = support::service(&idem::Idem::new(pool.clone())).await;
    let tea = order_json("tea", 1, 100);
    let taken = || acquisitions.swap(0, Ordering::SeqCst);

    taken();
    let first = app.call(post_order(ALICE, "first", &tea)).await;
    first.assert_created();
    assert_eq!(taken(), 1, "pool acquisitions of a first execution");

    let replay = app.call(post_order(ALICE, "first", &tea)).await;
    replay.assert_replay_of(&first);
    assert_eq!(taken(), 1, "pool acquisitions of a replay");

    app.call(post_order(ALICE, "second", &tea))
        .await
        .assert_created();
    assert_eq!(taken(), 1, "pool acquisitions of another first execution");
}

support::both_frameworks!(
    #[actix_web::test]
    a_first_execution_reads_and_writes_its_key_on_one_pool_connection,
);
