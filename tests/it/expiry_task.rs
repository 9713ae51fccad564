//! The expiry task in the background: it sweeps on its interval, keeps going after
//! database errors, reports what it did, and stops promptly when told to.

use crate::expiry_support;

use std::future::Future;
use std::time::{Duration, Instant};

use expiry_support::{Keys, Lease};
use idem::admin::Expiry;

/// Polls `done` every 20 ms until it holds, for at most 10 s.
async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn assert_send<T: Send>(value: T) -> T {
    value
}

#[tokio::test]
async fn the_spawned_task_sweeps_on_its_interval_and_stops() {
    let keys = Keys::new(3).await;
    keys.insert("first", 30, -60, Lease::None).await;
    keys.insert("kept", 4, 3600, Lease::None).await;
    let handle = Expiry::new(keys.served_pool.clone())
        .interval(Duration::from_millis(50))
        .batch_size(10)
        .spawn();
    eventually("the first sweep deleted the first keys", || async {
        handle.stats().sweeps >= 1
    })
    .await;
    assert_eq!(keys.left("first").await, 0);

    // Keys that expire later are taken by a later sweep.
    keys.insert("second", 5, -1, Lease::None).await;
    // The counters are updated when a sweep ends, just after its last DELETE commits:
    // wait for both.
    eventually("the second keys are deleted and counted", || async {
        let stats = handle.stats();
        // The row count grows batch by batch; a sweep is counted once it has also
        // counted the stranded keys after its last batch.
        keys.left("second").await == 0 && stats.rows_deleted == 35 && stats.sweeps >= 2
    })
    .await;
    assert_eq!(keys.left("kept").await, 4);

    let stats = handle.stats();
    assert_eq!(stats.rows_deleted, 35);
    assert!(
        stats.batches >= 4,
        "30 rows in batches of 10, then 5: {stats:?}"
    );
    assert!(stats.sweeps >= 2, "{stats:?}");
    assert_eq!(stats.failed_sweeps, 0);
    assert!(stats.last_sweep.is_some());

    handle.stop().await;
}

#[tokio::test]
async fn stop_does_not_wait_for_the_interval() {
    let keys = Keys::new(2).await;
    let expiry = Expiry::new(keys.served_pool.clone()).interval(Duration::from_secs(3600));
    let handle = expiry.clone().spawn();
    eventually("the first sweep ran", || async {
        expiry.stats().sweeps == 1
    })
    .await;
    // Had stop waited for the interval, it would return after an hour: a minute tells the
    // two apart on any machine, without timing how quickly it stops.
    tokio::time::timeout(Duration::from_secs(60), handle.stop())
        .await
        .expect("stop returns without waiting for the hour-long interval");
}

#[tokio::test]
async fn stop_interrupts_a_long_sweep_between_batches() {
    let keys = Keys::new(2).await;
    keys.insert("due", 1000, -60, Lease::None).await;
    // 100 batches with 200 ms pauses: some 20 s if it ran to the end.
    let expiry = Expiry::new(keys.served_pool.clone())
        .batch_size(10)
        .pause(Duration::from_millis(200));
    let handle = expiry.clone().spawn();
    eventually("a few batches ran", || async {
        expiry.stats().batches >= 2
    })
    .await;
    handle.stop().await;
    // Stopped between batches: had it finished the sweep first, no row would be left.
    let left = keys.left("due").await;
    assert!(left > 0 && left < 1000, "{left} rows left");
    assert_eq!(
        expiry.stats().rows_deleted,
        1000 - left.unsigned_abs(),
        "the stats count what was deleted"
    );
}

#[tokio::test]
async fn run_ends_when_its_shutdown_future_completes() {
    let keys = Keys::new(2).await;
    keys.insert("due", 3, -60, Lease::None).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let expiry = Expiry::new(keys.served_pool.clone()).interval(Duration::from_millis(50));
    let run = assert_send(expiry.clone().run(async {
        let _ = stopped.await;
    }));
    let task = tokio::spawn(run);
    eventually("the keys are deleted and counted", || async {
        keys.left("due").await == 0 && expiry.stats().rows_deleted == 3
    })
    .await;
    stop.send(()).expect("the task is running");
    tokio::time::timeout(Duration::from_secs(1), task)
        .await
        .expect("run returns promptly")
        .expect("task");
    assert_eq!(expiry.stats().rows_deleted, 3);
}

#[tokio::test]
async fn dropping_the_handle_or_closing_the_pool_ends_the_task() {
    let keys = Keys::new(2).await;
    let expiry = Expiry::new(keys.served_pool.clone()).interval(Duration::from_millis(20));
    let handle = expiry.clone().spawn();
    eventually("a sweep ran", || async { expiry.stats().sweeps >= 1 }).await;
    drop(handle);
    // Time for a sweep in flight at the drop to finish; a live task would sweep some
    // 15 times in each of these waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after_drop = expiry.stats().sweeps;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(expiry.stats().sweeps, after_drop, "no sweep after the drop");

    let pool = keys.db.pool(1).await;
    let handle = Expiry::new(pool.clone())
        .interval(Duration::from_secs(3600))
        .spawn();
    pool.close().await;
    eventually("the task ends with its pool", || async {
        handle.is_finished()
    })
    .await;
    handle.stop().await;
}

#[tokio::test]
async fn database_errors_are_counted_and_the_next_sweep_runs() {
    let keys = Keys::new(3).await;
    let expiry = Expiry::new(keys.served_pool.clone()).interval(Duration::from_millis(30));
    // The table disappears from under the task for a while.
    sqlx::query("ALTER TABLE idem_keys RENAME TO idem_keys_away")
        .execute(&keys.pool)
        .await
        .expect("rename");
    let handle = expiry.clone().spawn();
    eventually("sweeps failed", || async {
        expiry.stats().failed_sweeps >= 2
    })
    .await;
    assert!(!handle.is_finished(), "an error does not end the task");
    sqlx::query("ALTER TABLE idem_keys_away RENAME TO idem_keys")
        .execute(&keys.pool)
        .await
        .expect("rename back");
    keys.insert("due", 12, -60, Lease::None).await;
    // The rows are counted batch by batch, the sweep only once it has ended: wait for
    // both, or a busy machine sees the deleted rows before the sweep that deleted them.
    eventually("the keys are deleted and counted", || async {
        let stats = expiry.stats();
        keys.left("due").await == 0 && stats.rows_deleted == 12 && stats.sweeps >= 1
    })
    .await;
    let stats = expiry.stats();
    assert_eq!(stats.rows_deleted, 12);
    assert!(stats.sweeps >= 1);
    handle.stop().await;
}

#[tokio::test]
async fn a_failed_sweep_reports_the_error_and_what_it_did() {
    let keys = Keys::new(2).await;
    sqlx::query("DROP TABLE idem_keys CASCADE")
        .execute(&keys.pool)
        .await
        .expect("drop");
    let expiry = Expiry::new(keys.served_pool.clone());
    let error = expiry.sweep_once().await.expect_err("no table to sweep");
    assert_eq!(error.report().rows_deleted, 0);
    assert!(
        error.to_string().contains("idem_keys"),
        "the message names the cause: {error}"
    );
    assert_eq!(expiry.stats().failed_sweeps, 1);
    assert_eq!(expiry.stats().sweeps, 0);
}
