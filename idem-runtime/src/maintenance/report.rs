//! What a sweep of the expiry task reports: one sweep's figures, its failure, and the
//! totals of all sweeps for metrics.

use std::fmt;
use std::time::{Duration, SystemTime};

/// What one sweep did.
///
/// ```no_run
/// # async fn sweep(pool: sqlx::PgPool) -> Result<(), idem_runtime::admin::SweepError> {
/// let report = idem_runtime::admin::Expiry::new(pool).sweep_once().await?;
/// println!(
///     "{} rows in {} batches, {:?} (longest batch {:?})",
///     report.rows_deleted, report.batches, report.duration, report.longest_batch
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepReport {
    /// Rows deleted: keys, and the consumer inbox's expired entries ([`Inbox`](crate::Inbox)).
    pub rows_deleted: u64,
    /// Batches that deleted at least one row; each deleted at most the batch size. The
    /// final probe that finds nothing left is not counted.
    pub batches: u64,
    /// Wall time of the sweep, pauses between batches included.
    pub duration: Duration,
    /// The slowest batch: the longest any batch held its row locks.
    pub longest_batch: Duration,
    /// Keys in progress past their retention, counted after the sweep: the sweep never
    /// deletes them (see [`stranded_keys`](crate::admin::stranded_keys)).
    pub stranded: u64,
    /// When the oldest of them was claimed.
    pub oldest_stranded: Option<SystemTime>,
}

/// A sweep that failed on a database error. The rows it deleted before stay deleted.
///
/// ```no_run
/// # async fn sweep(pool: sqlx::PgPool) {
/// if let Err(error) = idem_runtime::admin::Expiry::new(pool).sweep_once().await {
///     eprintln!("{error} ({} rows deleted before)", error.report().rows_deleted);
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct SweepError {
    pub(super) report: SweepReport,
    pub(super) error: sqlx::Error,
}

impl SweepError {
    /// What the sweep did before it failed.
    ///
    /// ```no_run
    /// # fn show(error: &idem_runtime::admin::SweepError) {
    /// println!("{} rows deleted before the error", error.report().rows_deleted);
    /// # }
    /// ```
    pub fn report(&self) -> &SweepReport {
        &self.report
    }

    /// The database error that stopped the sweep.
    ///
    /// ```no_run
    /// # fn show(error: &idem_runtime::admin::SweepError) {
    /// let cause: &sqlx::Error = error.database_error();
    /// # }
    /// ```
    pub fn database_error(&self) -> &sqlx::Error {
        &self.error
    }
}

impl fmt::Display for SweepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expiry sweep failed: {}", self.error)
    }
}

impl std::error::Error for SweepError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Totals of an [`Expiry`](crate::admin::Expiry)'s sweeps, to export as metrics (counters,
/// plus the last sweep as gauges).
///
/// ```no_run
/// # fn export(expiry: &idem_runtime::admin::Expiry<sqlx::Postgres>) {
/// let stats = expiry.stats();
/// if let Some(last) = stats.last_sweep {
///     println!("idem_expiry_last_sweep_seconds {}", last.duration.as_secs_f64());
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExpiryStats {
    /// Sweeps that ran to the end (or to a stop).
    pub sweeps: u64,
    /// Sweeps that a database error ended; each is logged and retried next interval.
    pub failed_sweeps: u64,
    /// Rows deleted, by all sweeps (failed ones included).
    pub rows_deleted: u64,
    /// Batches that deleted rows, by all sweeps.
    pub batches: u64,
    /// The last sweep that ran to the end.
    pub last_sweep: Option<SweepReport>,
}
