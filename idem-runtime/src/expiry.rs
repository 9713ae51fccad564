//! Deleting keys past their retention, and the operator's view of the key table.
//!
//! Every key row carries its own `expires_at` (created at plus the handler's
//! `retention`), so the sweep needs no knowledge of the handlers: it deletes what is
//! past its time, except keys still in progress within their lease.

use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime};

use futures_util::FutureExt;
use sqlx::Pool;
use sqlx::migrate::Migrator;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::store::{Backend, DefaultBackend};

/// The expiry task: deletes key rows whose retention has ended, in bounded batches.
///
/// Each batch is one short transaction that picks up to [`batch_size`](Self::batch_size)
/// expired rows through the `expires_at` index, locks them with `FOR UPDATE SKIP LOCKED`
/// and deletes them by primary key. A sweep runs batches, pausing
/// [`pause`](Self::pause) between them so live traffic keeps the upper hand, until a
/// batch comes back short; sweeps repeat every [`interval`](Self::interval).
///
/// A key is deleted once its `expires_at` has passed, unless it is in progress within
/// its lease (`locked_until` still ahead). Every instance of an application may run the
/// task: batches skip rows another sweep (or a request) has locked, so sweeps neither
/// wait for each other nor delete a row twice.
///
/// Clones share their [statistics](Self::stats). On SQLite a batch is one `DELETE` by
/// `rowid`; the database lets one writer in at a time, so sweeps never meet.
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn start(pool: sqlx::PgPool) {
/// let expiry = idem_runtime::Expiry::new(pool)
///     .interval(Duration::from_secs(300))
///     .batch_size(500);
/// // In the background until `stop`; or `tokio::spawn(expiry.run(shutdown))`.
/// let handle = expiry.spawn();
/// // ... serve ...
/// handle.stop().await;
/// # }
/// ```
pub struct Expiry<DB: Backend = DefaultBackend> {
    pool: Pool<DB>,
    interval: Duration,
    batch_size: u32,
    pause: Duration,
    /// The batch script for `batch_size`, built once rather than per batch.
    script: Arc<str>,
    stats: Arc<Mutex<ExpiryStats>>,
}

impl<DB: Backend> Clone for Expiry<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            interval: self.interval,
            batch_size: self.batch_size,
            pause: self.pause,
            script: Arc::clone(&self.script),
            stats: Arc::clone(&self.stats),
        }
    }
}

impl<DB: Backend> fmt::Debug for Expiry<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Expiry")
            .field("interval", &self.interval)
            .field("batch_size", &self.batch_size)
            .field("pause", &self.pause)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

// The defaults are on `Expiry` with the default backend so that `Expiry::DEFAULT_*` needs
// no type annotation; they hold for every backend.
impl Expiry {
    /// Rows per batch unless [`batch_size`](Self::batch_size) says otherwise. A batch of
    /// 100 is a few milliseconds of one backend's work, short enough that live requests
    /// arriving meanwhile barely wait: with batches of 1000 (20 ms apart) live p99 rose
    /// 1.7 to 2.1 times during a sweep on a 2-core machine, with 100 (5 ms apart) 1.3 to
    /// 1.5 times (BENCHMARKS.md). Larger batches delete faster (on 100 000 expired keys at
    /// full speed: 100 did 13 000 to 20 000 rows/s, 1000 did 38 000, 5000 did 60 000;
    /// the README has the measurements), so raise it to clear a backlog off-peak.
    ///
    /// ```
    /// assert_eq!(idem_runtime::Expiry::DEFAULT_BATCH_SIZE, 100);
    /// ```
    pub const DEFAULT_BATCH_SIZE: u32 = 100;

    /// Time between sweeps unless [`interval`](Self::interval) says otherwise: keys live
    /// 24 hours at least, so a minute late is nothing, and an idle sweep costs one index
    /// probe.
    ///
    /// ```
    /// assert_eq!(idem_runtime::Expiry::DEFAULT_INTERVAL.as_secs(), 60);
    /// ```
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

    /// Pause between batches unless [`pause`](Self::pause) says otherwise: about as long
    /// as a batch of 100 takes, so a sweep with a large backlog keeps one connection
    /// busy about half the time, and still deletes some 12 000 rows/s (a billion keys a
    /// day).
    ///
    /// ```
    /// assert_eq!(idem_runtime::Expiry::DEFAULT_PAUSE.as_millis(), 5);
    /// ```
    pub const DEFAULT_PAUSE: Duration = Duration::from_millis(5);
}

impl<DB: Backend> Expiry<DB> {
    /// An expiry task on `pool`: a sweep every 60 s, batches of 100 rows, 5 ms between
    /// batches.
    ///
    /// ```
    /// # fn build(pool: sqlx::PgPool) {
    /// let expiry = idem_runtime::Expiry::new(pool);
    /// # }
    /// ```
    pub fn new(pool: Pool<DB>) -> Self {
        Self {
            pool,
            interval: Expiry::DEFAULT_INTERVAL,
            batch_size: Expiry::DEFAULT_BATCH_SIZE,
            pause: Expiry::DEFAULT_PAUSE,
            script: DB::batch_statement(Expiry::DEFAULT_BATCH_SIZE).into(),
            stats: Arc::default(),
        }
    }

    /// Time from the end of one sweep to the start of the next (default 60 s).
    ///
    /// ```
    /// # fn build(pool: sqlx::PgPool) {
    /// let expiry = idem_runtime::Expiry::new(pool).interval(std::time::Duration::from_secs(300));
    /// # }
    /// ```
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Most rows one batch deletes (default 100). Each batch is a transaction of its
    /// own that holds its rows' locks until it ends: smaller batches hold them shorter,
    /// larger ones make fewer round trips.
    ///
    /// # Panics
    ///
    /// If `rows` is 0.
    ///
    /// ```
    /// # fn build(pool: sqlx::PgPool) {
    /// let expiry = idem_runtime::Expiry::new(pool).batch_size(500);
    /// # }
    /// ```
    pub fn batch_size(mut self, rows: u32) -> Self {
        assert!(rows > 0, "the expiry batch size must be at least 1");
        self.batch_size = rows;
        self.script = DB::batch_statement(rows).into();
        self
    }

    /// Pause between two batches of one sweep (default 5 ms), so a large backlog is
    /// worked off without starving the application's own queries.
    ///
    /// ```
    /// # fn build(pool: sqlx::PgPool) {
    /// let expiry = idem_runtime::Expiry::new(pool).pause(std::time::Duration::from_millis(100));
    /// # }
    /// ```
    pub fn pause(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }

    /// Totals of every sweep run by this value and its clones, for export as metrics.
    ///
    /// ```
    /// # fn export(expiry: &idem_runtime::Expiry) {
    /// let stats = expiry.stats();
    /// println!("idem_expiry_rows_deleted_total {}", stats.rows_deleted);
    /// # }
    /// ```
    pub fn stats(&self) -> ExpiryStats {
        *self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one sweep now: batches until none is left to delete.
    ///
    /// On a database error the sweep stops; the rows deleted until then stay deleted
    /// and are reported in the error.
    ///
    /// ```no_run
    /// # async fn sweep(pool: sqlx::PgPool) -> Result<(), idem_runtime::SweepError> {
    /// let report = idem_runtime::Expiry::new(pool).sweep_once().await?;
    /// println!("deleted {} keys in {} batches", report.rows_deleted, report.batches);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn sweep_once(&self) -> Result<SweepReport, SweepError> {
        self.sweep_once_with(|_| {}).await
    }

    /// Like [`sweep_once`](Self::sweep_once), calling `on_batch` with the running totals
    /// after every batch that deleted rows (to drive a progress bar, for example).
    ///
    /// ```no_run
    /// # async fn sweep(pool: sqlx::PgPool) -> Result<(), idem_runtime::SweepError> {
    /// let expiry = idem_runtime::Expiry::new(pool);
    /// expiry
    ///     .sweep_once_with(|so_far| eprintln!("{} deleted", so_far.rows_deleted))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn sweep_once_with(
        &self,
        on_batch: impl FnMut(&SweepReport),
    ) -> Result<SweepReport, SweepError> {
        let never = pin!(std::future::pending::<()>());
        self.sweep(never, on_batch).await.result
    }

    /// How many rows a sweep started now would delete, without deleting anything (a
    /// dry run). Rows that another transaction holds are counted too.
    ///
    /// ```no_run
    /// # async fn dry_run(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
    /// let due = idem_runtime::Expiry::new(pool).count_deletable().await?;
    /// println!("{due} keys are past their retention");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn count_deletable(&self) -> Result<u64, sqlx::Error> {
        DB::count_deletable(&self.pool).await
    }

    /// The database's plan for one batch (`EXPLAIN` on PostgreSQL, `EXPLAIN QUERY PLAN`
    /// on SQLite; neither runs the statement): shows that the rows are found through the
    /// `expires_at` index.
    ///
    /// ```no_run
    /// # async fn plan(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
    /// let plan = idem_runtime::Expiry::new(pool).explain().await?;
    /// assert!(plan.contains("idem_keys_expires_at"), "{plan}");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn explain(&self) -> Result<String, sqlx::Error> {
        Ok(DB::explain_batch(&self.pool, self.batch_size)
            .await?
            .join("\n"))
    }

    /// Sweeps every [`interval`](Self::interval) until `shutdown` completes or the pool
    /// is closed; the application spawns the returned future. The first sweep starts at
    /// once. A failed sweep is logged and counted, and the next one runs on schedule.
    ///
    /// Shutdown is prompt: it is seen between batches, so at most the batch in flight
    /// finishes first.
    ///
    /// ```no_run
    /// # async fn start(pool: sqlx::PgPool) {
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// let task = tokio::spawn(idem_runtime::Expiry::new(pool).run(async {
    ///     let _ = stopped.await;
    /// }));
    /// // ... serve ...
    /// let _ = stop.send(());
    /// task.await.unwrap();
    /// # }
    /// ```
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let this = Arc::new(self);
        run_until(Arc::downgrade(&this), shutdown).await;
        // Held to here: with `run` the caller's future owns the task's lifetime.
        drop(this);
    }

    /// Runs [`run`](Self::run) on the current tokio runtime, stopped by the returned
    /// handle's [`stop`](ExpiryHandle::stop) or when the handle is dropped.
    ///
    /// While it sleeps between sweeps the task holds no strong reference to its state:
    /// only the handle does, so a dropped handle ends the task at the next wake-up even
    /// if its stop signal were missed.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime.
    ///
    /// ```no_run
    /// # async fn start(pool: sqlx::PgPool) {
    /// let handle = idem_runtime::Expiry::new(pool).spawn();
    /// // ... serve; export handle.stats() ...
    /// handle.stop().await;
    /// # }
    /// ```
    pub fn spawn(self) -> ExpiryHandle<DB> {
        let expiry = Arc::new(self);
        let (stop, stopped) = oneshot::channel::<()>();
        // A dropped sender resolves the receiver too: dropping the handle stops the task.
        let task = tokio::spawn(run_until(Arc::downgrade(&expiry), async move {
            let _ = stopped.await;
        }));
        ExpiryHandle { expiry, stop, task }
    }

    /// One sweep, ending early when `stop` completes during a pause.
    async fn sweep(
        &self,
        mut stop: Pin<&mut impl Future<Output = ()>>,
        mut on_batch: impl FnMut(&SweepReport),
    ) -> SweepOutcome {
        let started = Instant::now();
        let mut report = SweepReport::default();
        let mut stopped = false;
        loop {
            let batch_started = Instant::now();
            let deleted = match DB::delete_batch(&self.pool, &self.script).await {
                Ok(deleted) => deleted,
                Err(sqlx::Error::PoolClosed) => {
                    // The application is shutting down: not a failure of the sweep.
                    stopped = true;
                    break;
                }
                Err(error) => {
                    report.duration = started.elapsed();
                    self.update_stats(|stats| stats.failed_sweeps += 1);
                    tracing::warn!(
                        error = %error,
                        rows_deleted = report.rows_deleted,
                        batches = report.batches,
                        retry_in_s = self.interval.as_secs_f64(),
                        "idem expiry sweep failed",
                    );
                    return SweepOutcome {
                        result: Err(SweepError { report, error }),
                        stopped: false,
                    };
                }
            };
            let took = batch_started.elapsed();
            if deleted > 0 {
                report.batches += 1;
                report.rows_deleted += deleted;
                report.longest_batch = report.longest_batch.max(took);
                // Totals grow batch by batch, so a long sweep shows progress in metrics.
                self.update_stats(|stats| {
                    stats.batches += 1;
                    stats.rows_deleted += deleted;
                });
                on_batch(&report);
            }
            // A short batch means nothing more is due, or the rest is locked by another
            // sweep, which deletes it: either way this sweep is done.
            if deleted < u64::from(self.batch_size) {
                break;
            }
            // At full speed, sleeping even for zero would wait for tokio's next timer
            // tick (1 ms, a tenth of a batch): only look whether to stop.
            if self.pause.is_zero() {
                if stop.as_mut().now_or_never().is_some() {
                    stopped = true;
                    break;
                }
                continue;
            }
            tokio::select! {
                biased;
                () = stop.as_mut() => {
                    stopped = true;
                    break;
                }
                () = tokio::time::sleep(self.pause) => {}
            }
        }
        if !stopped {
            self.sweep_inbox(&mut report).await;
        }
        self.count_stranded(&mut report).await;
        report.duration = started.elapsed();
        self.update_stats(|stats| {
            stats.sweeps += 1;
            stats.last_sweep = Some(report);
        });
        let duration_ms = report.duration.as_secs_f64() * 1e3;
        // An idle sweep every minute is not news; one that deleted something is.
        if report.rows_deleted > 0 {
            tracing::info!(
                rows_deleted = report.rows_deleted,
                batches = report.batches,
                duration_ms,
                longest_batch_ms = report.longest_batch.as_secs_f64() * 1e3,
                stopped,
                "idem expiry sweep",
            );
        } else {
            tracing::debug!(
                rows_deleted = 0,
                batches = 0,
                duration_ms,
                stopped,
                "idem expiry sweep"
            );
        }
        SweepOutcome {
            result: Ok(report),
            stopped,
        }
    }

    /// Deletes the consumer inbox's expired entries ([`Inbox`](crate::Inbox)), counted
    /// with the keys in the report. A failure is logged; the keys' sweep stands.
    async fn sweep_inbox(&self, report: &mut SweepReport) {
        match crate::inbox::sweep(&self.pool, self.batch_size).await {
            Ok((rows, batches)) => {
                report.rows_deleted += rows;
                report.batches += batches;
                if rows > 0 {
                    self.update_stats(|stats| {
                        stats.batches += batches;
                        stats.rows_deleted += rows;
                    });
                }
            }
            Err(error) => {
                tracing::warn!(%error, "idem expiry sweep of the consumer inbox failed");
            }
        }
    }

    /// Counts the keys this sweep passed by because their operation never finished, for
    /// the report, the metrics and a warning an operator can act on.
    async fn count_stranded(&self, report: &mut SweepReport) {
        match DB::count_stranded(&self.pool).await {
            Ok((stranded, oldest)) => {
                report.stranded = stranded;
                report.oldest_stranded = oldest.map(crate::store::from_micros);
                let oldest_age = report
                    .oldest_stranded
                    .and_then(|at| SystemTime::now().duration_since(at).ok());
                crate::metrics::stranded(stranded, oldest_age);
                if stranded > 0 {
                    tracing::warn!(
                        stranded,
                        oldest_age_s = oldest_age.map(|age| age.as_secs()),
                        "idem keys in progress past their retention are kept, not deleted: \
                         list them with `idem stranded` and resolve them",
                    );
                }
            }
            Err(error) => tracing::warn!(%error, "idem expiry: counting stranded keys failed"),
        }
    }

    fn update_stats(&self, update: impl FnOnce(&mut ExpiryStats)) {
        update(&mut self.stats.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

struct SweepOutcome {
    result: Result<SweepReport, SweepError>,
    /// The stop signal (or the pool's closing) ended the sweep.
    stopped: bool,
}

/// The task's loop. Like sqlx's pool reaper it keeps only a weak reference while it
/// sleeps, so it ends when its owner is gone, and it ends on the stop signal or when the
/// pool is closed.
async fn run_until<DB: Backend>(expiry: Weak<Expiry<DB>>, shutdown: impl Future<Output = ()>) {
    let Some(closed) = expiry.upgrade().map(|e| e.pool.close_event()) else {
        return;
    };
    let mut stop = pin!(async move {
        tokio::select! {
            () = shutdown => {}
            () = closed => {}
        }
    });
    loop {
        let Some(this) = expiry.upgrade() else { return };
        if this.pool.is_closed() || this.sweep(stop.as_mut(), |_| {}).await.stopped {
            return;
        }
        let interval = this.interval;
        drop(this);
        tokio::select! {
            biased;
            () = stop.as_mut() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// The running expiry task of [`Expiry::spawn`].
///
/// Dropping the handle stops the task too, but without waiting for it: call
/// [`stop`](Self::stop) at shutdown.
///
/// ```no_run
/// # async fn start(pool: sqlx::PgPool) {
/// let handle = idem_runtime::Expiry::new(pool).spawn();
/// assert!(!handle.is_finished());
/// handle.stop().await;
/// # }
/// ```
#[must_use = "the expiry task stops when its handle is dropped"]
#[derive(Debug)]
pub struct ExpiryHandle<DB: Backend = DefaultBackend> {
    expiry: Arc<Expiry<DB>>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl<DB: Backend> ExpiryHandle<DB> {
    /// Totals of the task's sweeps so far; see [`Expiry::stats`].
    ///
    /// ```no_run
    /// # fn export(handle: &idem_runtime::ExpiryHandle) {
    /// let stats = handle.stats();
    /// println!("idem_expiry_sweeps_total {}", stats.sweeps);
    /// println!("idem_expiry_failed_sweeps_total {}", stats.failed_sweeps);
    /// # }
    /// ```
    pub fn stats(&self) -> ExpiryStats {
        self.expiry.stats()
    }

    /// Whether the task has ended (stopped, or its pool was closed).
    ///
    /// ```no_run
    /// # async fn check(pool: sqlx::PgPool) {
    /// let handle = idem_runtime::Expiry::new(pool.clone()).spawn();
    /// pool.close().await;
    /// # tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    /// assert!(handle.is_finished());
    /// # }
    /// ```
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the task and waits for it to end: at once when it is sleeping, after the
    /// batch in flight when it is sweeping.
    ///
    /// ```no_run
    /// # async fn shutdown(handle: idem_runtime::ExpiryHandle) {
    /// handle.stop().await;
    /// # }
    /// ```
    pub async fn stop(self) {
        let Self { expiry, stop, task } = self;
        let _ = stop.send(());
        if let Err(error) = task.await
            && error.is_panic()
        {
            std::panic::resume_unwind(error.into_panic());
        }
        drop(expiry);
    }
}

/// What one sweep did.
///
/// ```no_run
/// # async fn sweep(pool: sqlx::PgPool) -> Result<(), idem_runtime::SweepError> {
/// let report = idem_runtime::Expiry::new(pool).sweep_once().await?;
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
    /// deletes them (see [`stranded_keys`](crate::stranded_keys)).
    pub stranded: u64,
    /// When the oldest of them was claimed.
    pub oldest_stranded: Option<SystemTime>,
}

/// A sweep that failed on a database error. The rows it deleted before stay deleted.
///
/// ```no_run
/// # async fn sweep(pool: sqlx::PgPool) {
/// if let Err(error) = idem_runtime::Expiry::new(pool).sweep_once().await {
///     eprintln!("{error} ({} rows deleted before)", error.report().rows_deleted);
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct SweepError {
    report: SweepReport,
    error: sqlx::Error,
}

impl SweepError {
    /// What the sweep did before it failed.
    ///
    /// ```no_run
    /// # fn show(error: &idem_runtime::SweepError) {
    /// println!("{} rows deleted before the error", error.report().rows_deleted);
    /// # }
    /// ```
    pub fn report(&self) -> &SweepReport {
        &self.report
    }

    /// The database error that stopped the sweep.
    ///
    /// ```no_run
    /// # fn show(error: &idem_runtime::SweepError) {
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

/// Totals of an [`Expiry`]'s sweeps, to export as metrics (counters, plus the last
/// sweep as gauges).
///
/// ```no_run
/// # fn export(expiry: &idem_runtime::Expiry) {
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

/// Whether a database holds exactly the idem schema this build ships.
///
/// ```no_run
/// # async fn check(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// match idem_runtime::schema_status(&pool).await? {
///     idem_runtime::SchemaStatus::Current { .. } => {}
///     other => eprintln!("{other}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaStatus {
    /// Every migration of this build is applied, and no other.
    Current {
        /// The latest migration applied.
        version: i64,
    },
    /// No history table (`_idem_migrations`): idem's schema was never applied here.
    Missing,
    /// Some of this build's migrations are not applied yet: run `idem::migrate`.
    Behind {
        /// The latest migration applied, if any.
        version: Option<i64>,
        /// The latest migration of this build.
        expected: i64,
    },
    /// The database has migrations this build does not know: a newer idem migrated it.
    Ahead {
        /// The latest migration applied.
        version: i64,
        /// The latest migration of this build.
        expected: i64,
    },
    /// A migration is recorded as failed part-way.
    Failed {
        /// The failed migration.
        version: i64,
    },
    /// A migration was applied from a different text than this build's (checksums differ).
    Modified {
        /// The migration whose checksum differs.
        version: i64,
    },
}

impl SchemaStatus {
    /// Whether the schema is exactly this build's.
    ///
    /// ```
    /// use idem_runtime::SchemaStatus;
    /// assert!(SchemaStatus::Current { version: 1 }.is_current());
    /// assert!(!SchemaStatus::Missing.is_current());
    /// ```
    pub fn is_current(&self) -> bool {
        matches!(self, Self::Current { .. })
    }
}

impl fmt::Display for SchemaStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Current { version } => write!(f, "idem's schema is current (version {version})"),
            Self::Missing => write!(
                f,
                "idem's schema is not in this database (no `{}` table)",
                crate::MIGRATIONS_TABLE
            ),
            Self::Behind {
                version: Some(version),
                expected,
            } => write!(
                f,
                "idem's schema is at version {version}, older than this idem's {expected}"
            ),
            Self::Behind {
                version: None,
                expected,
            } => write!(
                f,
                "idem's schema has no migration applied; this idem's latest is {expected}"
            ),
            Self::Ahead { version, expected } => write!(
                f,
                "idem's schema is at version {version}, newer than this idem's {expected}"
            ),
            Self::Failed { version } => write!(
                f,
                "idem's migration {version} is recorded as failed part-way in `{}`",
                crate::MIGRATIONS_TABLE
            ),
            Self::Modified { version } => write!(
                f,
                "idem's migration {version} was applied from a different text than this \
                 idem's (checksum mismatch)"
            ),
        }
    }
}

/// Compares idem's migration history in the database (`_idem_migrations`) with the
/// migrations built into this program.
///
/// ```no_run
/// # async fn check(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let status = idem_runtime::schema_status(&pool).await?;
/// if !status.is_current() {
///     return Err(status.to_string().into());
/// }
/// # Ok(())
/// # }
/// ```
pub async fn schema_status<DB: Backend>(pool: &Pool<DB>) -> Result<SchemaStatus, sqlx::Error> {
    let Some(applied) = DB::applied_migrations(pool).await? else {
        return Ok(SchemaStatus::Missing);
    };
    Ok(compare(&crate::migrate::migrator::<DB>(), &applied))
}

fn compare(built_in: &Migrator, applied: &[(i64, bool, Vec<u8>)]) -> SchemaStatus {
    let known: Vec<_> = built_in
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .collect();
    let expected = known.iter().map(|m| m.version).max().unwrap_or(0);
    let version = applied.iter().map(|row| row.0).max();
    if let Some((failed, ..)) = applied.iter().find(|row| !row.1) {
        return SchemaStatus::Failed { version: *failed };
    }
    if let Some(version) = version
        && applied
            .iter()
            .any(|(v, ..)| !known.iter().any(|m| m.version == *v))
    {
        return SchemaStatus::Ahead { version, expected };
    }
    for m in &known {
        match applied.iter().find(|row| row.0 == m.version) {
            None => return SchemaStatus::Behind { version, expected },
            Some((v, _, checksum)) if checksum.as_slice() != &*m.checksum => {
                return SchemaStatus::Modified { version: *v };
            }
            Some(_) => {}
        }
    }
    SchemaStatus::Current {
        version: version.unwrap_or(expected),
    }
}

/// Counts of the key table by state and age, the oldest key in progress, and its size on
/// disk. Scans the whole table: meant for an operator, not for a metrics scrape.
///
/// ```no_run
/// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// let stats = idem_runtime::key_stats(&pool).await?;
/// for state in &stats.states {
///     println!("{}: {}", state.state, state.ages.total);
/// }
/// println!("{} due for deletion, table {} bytes", stats.deletable, stats.table_bytes);
/// # Ok(())
/// # }
/// ```
pub async fn key_stats<DB: Backend>(pool: &Pool<DB>) -> Result<KeyStats, sqlx::Error> {
    DB::key_stats(pool).await
}

/// What [`key_stats`] found.
///
/// ```no_run
/// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// let stats = idem_runtime::key_stats(&pool).await?;
/// let index_bytes: u64 = stats.indexes.iter().map(|i| i.bytes).sum();
/// println!("{} keys, {} in a lease", stats.total(), stats.in_lease);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyStats {
    /// Keys per state (`started`, `completed`), by age; states without keys are absent.
    pub states: Vec<StateCount>,
    /// Keys past their retention and not in a lease: what a sweep now would delete.
    pub deletable: u64,
    /// Keys whose lease (`locked_until`) is still running.
    pub in_lease: u64,
    /// The oldest key in state `started`, if any.
    pub oldest_in_progress: Option<InProgressKey>,
    /// Keys in progress past their retention with no live lease: operations that never
    /// finished and whose clients have not come back. The sweep never deletes them; see
    /// [`stranded_keys`](crate::stranded_keys) and [`resolve_key`](crate::resolve_key).
    pub stranded: u64,
    /// The oldest of them (by `created_at`), if any.
    pub oldest_stranded: Option<InProgressKey>,
    /// The table's heap and TOAST size in bytes (`pg_table_size`), without indexes.
    pub table_bytes: u64,
    /// Each index of the table with its size.
    pub indexes: Vec<IndexSize>,
}

impl KeyStats {
    /// All keys, in every state.
    ///
    /// ```no_run
    /// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
    /// println!("{} keys", idem_runtime::key_stats(&pool).await?.total());
    /// # Ok(())
    /// # }
    /// ```
    pub fn total(&self) -> u64 {
        self.states.iter().map(|s| s.ages.total).sum()
    }
}

/// The keys in one state.
///
/// ```no_run
/// # fn show(count: &idem_runtime::StateCount) {
/// println!("{}: {} in the last hour", count.state, count.ages.last_hour);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateCount {
    /// The state: `started` (in progress) or `completed`.
    pub state: String,
    /// How many, by age.
    pub ages: AgeCounts,
}

/// Keys counted by age (time since `created_at`); the buckets add up to `total`.
///
/// ```no_run
/// # fn show(ages: &idem_runtime::AgeCounts) {
/// assert_eq!(ages.total, ages.last_hour + ages.last_day + ages.last_week + ages.older);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgeCounts {
    /// All of them.
    pub total: u64,
    /// Created within the last hour.
    pub last_hour: u64,
    /// Created 1 to 24 hours ago.
    pub last_day: u64,
    /// Created 1 to 7 days ago.
    pub last_week: u64,
    /// Created more than 7 days ago.
    pub older: u64,
}

/// A key in state `started`.
///
/// ```no_run
/// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// if let Some(key) = idem_runtime::key_stats(&pool).await?.oldest_in_progress {
///     println!("{}/{} since {:?}", key.scope, key.key, key.created_at);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InProgressKey {
    /// The key's scope.
    pub scope: String,
    /// The key.
    pub key: String,
    /// How far the request got.
    pub recovery_point: String,
    /// When the key was claimed.
    pub created_at: SystemTime,
    /// End of its lease, if it has one.
    pub locked_until: Option<SystemTime>,
}

/// One index of the key table.
///
/// ```no_run
/// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// for index in idem_runtime::key_stats(&pool).await?.indexes {
///     println!("{}: {} bytes", index.name, index.bytes);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexSize {
    /// The index's name, e.g. `idem_keys_expires_at`.
    pub name: String,
    /// Its size on disk in bytes.
    pub bytes: u64,
}

/// How many bytes of a stored body [`inspect_key`] reads.
///
/// ```no_run
/// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// if let Some(record) = idem_runtime::inspect_key(&pool, "1001", "order-7").await? {
///     assert!(record.response_body_head.len() <= idem_runtime::BODY_PREVIEW_BYTES);
/// }
/// # Ok(())
/// # }
/// ```
pub const BODY_PREVIEW_BYTES: usize = 1024;

/// One key's row: its state, the request it was claimed for and the stored response,
/// with only the first [`BODY_PREVIEW_BYTES`] of the body. `None` when there is no
/// such key (in progress keys of the single-transaction form are not visible until
/// their transaction commits).
///
/// `key` is the key as stored: the bare form, without the quotes of a Structured Field
/// string ([`IdempotencyKey::parse`](crate::IdempotencyKey::parse) gives it).
///
/// ```no_run
/// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// if let Some(record) = idem_runtime::inspect_key(&pool, "1001", "8e03978e-40d5").await? {
///     println!("{} {} -> {:?}", record.method, record.path, record.response_status);
/// }
/// # Ok(())
/// # }
/// ```
pub async fn inspect_key<DB: Backend>(
    pool: &Pool<DB>,
    scope: &str,
    key: &str,
) -> Result<Option<KeyRecord>, sqlx::Error> {
    DB::inspect_key(pool, scope, key, BODY_PREVIEW_BYTES).await
}

/// A key row, as [`inspect_key`] reads it.
///
/// ```no_run
/// # fn show(record: &idem_runtime::KeyRecord) {
/// for (name, value) in &record.response_headers {
///     println!("{name}: {}", String::from_utf8_lossy(value));
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyRecord {
    /// The key's scope.
    pub scope: String,
    /// The key.
    pub key: String,
    /// `started` (in progress) or `completed`.
    pub state: String,
    /// How far the request got.
    pub recovery_point: String,
    /// SHA-256 of the request the key was claimed for (method, path, body).
    pub fingerprint: Vec<u8>,
    /// Method of that request.
    pub method: String,
    /// Path and query of that request.
    pub path: String,
    /// When the key was claimed.
    pub created_at: SystemTime,
    /// When its retention ends.
    pub expires_at: SystemTime,
    /// End of its lease, if it has one.
    pub locked_until: Option<SystemTime>,
    /// Stored status, once completed.
    pub response_status: Option<u16>,
    /// Stored headers, in order, once completed.
    pub response_headers: Vec<(String, Vec<u8>)>,
    /// Length of the stored body, once completed.
    pub response_body_len: Option<u64>,
    /// The body's first bytes (at most [`BODY_PREVIEW_BYTES`]).
    pub response_body_head: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(rows: &[(i64, bool)]) -> Vec<(i64, bool, Vec<u8>)> {
        let built_in = crate::migrate::migrator::<DefaultBackend>();
        rows.iter()
            .map(|&(version, success)| {
                let checksum = built_in
                    .iter()
                    .find(|m| m.version == version)
                    .map_or_else(Vec::new, |m| m.checksum.to_vec());
                (version, success, checksum)
            })
            .collect()
    }

    fn versions() -> Vec<i64> {
        crate::migrate::migrator::<DefaultBackend>()
            .iter()
            .map(|m| m.version)
            .collect()
    }

    #[test]
    fn all_built_in_migrations_applied_is_current() {
        let all: Vec<_> = versions().into_iter().map(|v| (v, true)).collect();
        let latest = *versions().last().unwrap();
        assert_eq!(
            compare(
                &crate::migrate::migrator::<DefaultBackend>(),
                &applied(&all)
            ),
            SchemaStatus::Current { version: latest }
        );
    }

    #[test]
    fn a_missing_migration_is_behind_and_an_unknown_one_ahead() {
        let latest = *versions().last().unwrap();
        assert_eq!(
            compare(&crate::migrate::migrator::<DefaultBackend>(), &[]),
            SchemaStatus::Behind {
                version: None,
                expected: latest
            }
        );
        let mut rows: Vec<_> = versions().into_iter().map(|v| (v, true)).collect();
        rows.push((latest + 1, true));
        assert_eq!(
            compare(
                &crate::migrate::migrator::<DefaultBackend>(),
                &applied(&rows)
            ),
            SchemaStatus::Ahead {
                version: latest + 1,
                expected: latest
            }
        );
    }

    #[test]
    fn failed_and_modified_migrations_are_named() {
        let first = versions()[0];
        assert_eq!(
            compare(
                &crate::migrate::migrator::<DefaultBackend>(),
                &applied(&[(first, false)])
            ),
            SchemaStatus::Failed { version: first }
        );
        let rows: Vec<_> = versions().into_iter().map(|v| (v, true)).collect();
        let mut rows = applied(&rows);
        rows[0].2 = vec![0; 48];
        assert_eq!(
            compare(&crate::migrate::migrator::<DefaultBackend>(), &rows),
            SchemaStatus::Modified { version: first }
        );
    }
}
