//! Several instances may sweep at once: they never wait for each other or for a
//! transaction holding a key, and every row is deleted (and counted) exactly once.

use crate::expiry_support;

use std::time::Duration;

use expiry_support::{Keys, Lease};
use idem::admin::Expiry;
use sqlx::Connection;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sweeps_at_once_delete_each_row_once() {
    let keys = Keys::new(2).await;
    keys.insert("due", 10_000, -60, Lease::None).await;
    keys.insert("kept", 100, 3600, Lease::None).await;

    // Two "instances": separate pools, so separate connections and transactions.
    let mut sweeps = Vec::new();
    for _ in 0..2 {
        let expiry = Expiry::new(keys.db.pool(1).await)
            .batch_size(100)
            .pause(Duration::ZERO);
        sweeps.push(tokio::spawn(async move { expiry.sweep_once().await }));
    }
    let mut deleted = Vec::new();
    for sweep in sweeps {
        let report = sweep.await.expect("task").expect("neither sweep errors");
        deleted.push(report.rows_deleted);
    }
    eprintln!("rows deleted by each sweep: {deleted:?}");
    assert_eq!(
        deleted.iter().sum::<u64>(),
        10_000,
        "every row counted by exactly one sweep: {deleted:?}"
    );
    assert_eq!(keys.left("due").await, 0);
    assert_eq!(keys.left("kept").await, 100);
}

/// Rows locked by another transaction (another sweep's batch, or a request reclaiming an
/// expired key) are passed over, not waited for, and deleted by a later sweep.
#[tokio::test]
async fn a_sweep_skips_rows_another_transaction_holds() {
    let keys = Keys::new(2).await;
    keys.insert("due", 500, -60, Lease::None).await;
    keys.insert("held", 5, -120, Lease::None).await;

    let mut holder = sqlx::PgConnection::connect(keys.db.url())
        .await
        .expect("connect");
    let mut held = holder.begin().await.expect("begin");
    let locked: Vec<String> = sqlx::query_scalar(
        "SELECT idem_key FROM idem_keys WHERE idem_key LIKE 'held-%' FOR UPDATE",
    )
    .fetch_all(&mut *held)
    .await
    .expect("lock");
    assert_eq!(locked.len(), 5);

    let expiry = Expiry::new(keys.pool.clone()).batch_size(100);
    let report = tokio::time::timeout(Duration::from_secs(10), expiry.sweep_once())
        .await
        .expect("the sweep does not wait for the locked rows")
        .expect("sweep");
    assert_eq!(report.rows_deleted, 500);
    assert_eq!(keys.left("held").await, 5);

    held.rollback().await.expect("release the locks");
    let report = expiry.sweep_once().await.expect("sweep after the release");
    assert_eq!(report.rows_deleted, 5);
    assert_eq!(keys.total().await, 0);
}
