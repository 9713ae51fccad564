//! A sweep deletes in batches of at most the batch size, as many as the rows need, and
//! pauses between them.

use crate::expiry_support;
use crate::support;

use std::time::Duration;

use expiry_support::{Keys, KeysBackend, Lease};
use idem::admin::Expiry;

/// Sweeps with `batch_size`; returns the rows each batch deleted, in order.
async fn batches<DB: KeysBackend>(
    keys: &Keys<DB>,
    batch_size: u32,
) -> (idem::admin::SweepReport, Vec<u64>) {
    let mut sizes = Vec::new();
    let mut deleted_before = 0;
    let report = Expiry::new(keys.served_pool.clone())
        .batch_size(batch_size)
        .pause(Duration::ZERO)
        .sweep_once_with(|so_far| {
            sizes.push(so_far.rows_deleted - deleted_before);
            deleted_before = so_far.rows_deleted;
        })
        .await
        .expect("sweep");
    (report, sizes)
}

async fn batches_are_bounded_by_the_batch_size<DB: KeysBackend>() {
    let keys = Keys::<DB>::open(2).await;
    keys.insert("due", 2500, -60, Lease::None).await;
    keys.insert("kept", 300, 3600, Lease::None).await;

    let (report, sizes) = batches(&keys, 1000).await;
    assert_eq!(sizes, [1000, 1000, 500]);
    assert_eq!(report.batches, 3, "ceil(2500 / 1000)");
    assert_eq!(report.rows_deleted, 2500);
    assert!(report.longest_batch <= report.duration);
    assert_eq!(keys.left("kept").await, 300);

    // An exact multiple: the probe that finds nothing is not a batch.
    keys.insert("even", 600, -60, Lease::None).await;
    let (report, sizes) = batches(&keys, 200).await;
    assert_eq!(sizes, [200, 200, 200]);
    assert_eq!(report.batches, 3);

    // A batch size of one still gets through everything.
    keys.insert("single", 7, -60, Lease::None).await;
    let (report, sizes) = batches(&keys, 1).await;
    assert_eq!(sizes, [1; 7]);
    assert_eq!(report.rows_deleted, 7);

    let (report, sizes) = batches(&keys, 1000).await;
    assert!(sizes.is_empty());
    assert_eq!((report.rows_deleted, report.batches), (0, 0));
    assert_eq!(keys.total().await, 300);
}

async fn a_sweep_pauses_between_batches<DB: KeysBackend>() {
    let keys = Keys::<DB>::open(2).await;
    keys.insert("due", 50, -60, Lease::None).await;
    let pause = Duration::from_millis(100);
    let report = Expiry::new(keys.served_pool.clone())
        .batch_size(10)
        .pause(pause)
        .sweep_once()
        .await
        .expect("sweep");
    assert_eq!(report.batches, 5);
    // Five full batches: a pause after each, the last one before the empty probe.
    assert!(
        report.duration >= 5 * pause,
        "5 pauses of {pause:?} in {:?}",
        report.duration
    );
}

support::database_tests!(
    batches_are_bounded_by_the_batch_size,
    a_sweep_pauses_between_batches,
);
