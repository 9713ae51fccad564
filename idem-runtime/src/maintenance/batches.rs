//! The batch loop of the expiry sweep, one for every table it keeps: the key table's
//! batches and the consumer inbox's run through it alike, with the same pause between
//! batches, the same stop signal and the same timing.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures_util::FutureExt;

/// How a run of batches ended.
#[derive(Debug)]
pub(super) enum Ended {
    /// A batch came back short: nothing more is due, or the rest is locked by another
    /// sweep, which deletes it.
    Drained,
    /// The stop signal came during a pause, or the pool was closed: the application is
    /// shutting down, which is not a failure of the sweep.
    Stopped,
    /// A database error ended the run; the batches before it stay done.
    Failed(sqlx::Error),
}

/// How a sweep paces its batches.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pace {
    /// Rows one batch deletes at most: a batch that deletes fewer ends the run.
    pub(super) batch_size: u32,
    /// Time between two batches, so live traffic keeps the upper hand.
    pub(super) pause: Duration,
}

/// Runs `batch` (one delete, returning its rows) until a batch comes back short, pausing
/// between batches, and ending early when `stop` completes during a pause. `deleted` gets
/// the rows and the time of every batch that deleted some, as it ends, so totals can grow
/// batch by batch.
pub(super) async fn run<Fut>(
    pace: Pace,
    mut stop: Pin<&mut impl Future<Output = ()>>,
    mut batch: impl FnMut() -> Fut,
    mut deleted: impl FnMut(u64, Duration),
) -> Ended
where
    Fut: Future<Output = sqlx::Result<u64>>,
{
    loop {
        let started = Instant::now();
        let rows = match batch().await {
            Ok(rows) => rows,
            Err(sqlx::Error::PoolClosed) => return Ended::Stopped,
            Err(error) => return Ended::Failed(error),
        };
        if rows > 0 {
            deleted(rows, started.elapsed());
        }
        if rows < u64::from(pace.batch_size) {
            return Ended::Drained;
        }
        // At full speed, sleeping even for zero would wait for tokio's next timer tick
        // (1 ms, a tenth of a batch): only look whether to stop.
        if pace.pause.is_zero() {
            if stop.as_mut().now_or_never().is_some() {
                return Ended::Stopped;
            }
            continue;
        }
        tokio::select! {
            biased;
            () = stop.as_mut() => return Ended::Stopped,
            () = tokio::time::sleep(pace.pause) => {}
        }
    }
}
