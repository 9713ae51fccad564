//! Deleting keys past their retention, and the operator's view of the key table.
//!
//! Every key row carries its own `expires_at` (created at plus the handler's
//! `retention`), so the sweep needs no knowledge of the handlers: it deletes what is
//! past its time, except keys still in progress within their lease.

use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use sqlx::Pool;

use super::batches::{self, Ended, Pace};
use super::report::{ExpiryStats, SweepError, SweepReport};
use crate::store::Backend;
use crate::store::choice::DefaultBackend;

/// The target of this module's events, as it was before the module moved: filters
/// and subscribers name it (the guide, `docs/guide/operations.md`).
const TRACE_TARGET: &str = "idem_runtime::expiry";

/// The expiry task: deletes key rows whose retention has ended, in bounded batches, and
/// then the consumer inbox's expired entries ([`Inbox`](crate::Inbox)) in batches alike.
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
/// let expiry = idem_runtime::admin::Expiry::new(pool)
///     .interval(Duration::from_secs(300))
///     .batch_size(500);
/// // In the background until `stop`; or `tokio::spawn(expiry.run(shutdown))`.
/// let handle = expiry.spawn();
/// // ... serve ...
/// handle.stop().await;
/// # }
/// ```
pub struct Expiry<DB: crate::store::choice::ChosenBackend<'static> = DefaultBackend> {
    pub(super) pool: Pool<DB>,
    pub(super) interval: Duration,
    batch_size: u32,
    pause: Duration,
    /// The batch script for `batch_size`, built once rather than per batch.
    script: Arc<str>,
    /// The consumer inbox's batch for `batch_size`, likewise.
    inbox_script: Arc<str>,
    /// The batch of staged bodies no completion will take, where the database stages.
    orphans_script: Option<Arc<str>>,
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
            inbox_script: Arc::clone(&self.inbox_script),
            orphans_script: self.orphans_script.clone(),
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

// The defaults are on `Expiry` of one backend so that `Expiry::DEFAULT_*` needs no type
// annotation; they hold for every backend. Not the default backend: with both databases
// enabled that is none.
impl Expiry<crate::store::choice::AnyBackend> {
    /// Rows per batch unless [`batch_size`](Self::batch_size) says otherwise. A batch of
    /// 100 is a few milliseconds of one backend's work, short enough that live requests
    /// arriving meanwhile barely wait: with batches of 1000 (20 ms apart) live p99 rose
    /// 1.7 to 2.1 times during a sweep on a 2-core machine, with 100 (5 ms apart) 1.3 to
    /// 1.5 times (BENCHMARKS.md). Larger batches delete faster (on 100 000 expired keys at
    /// full speed: 100 did 13 000 to 20 000 rows/s, 1000 did 38 000, 5000 did 60 000;
    /// the guide's `docs/guide/operations.md` has the measurements), so raise it to clear a backlog off-peak.
    ///
    /// ```
    /// assert_eq!(idem_runtime::admin::Expiry::DEFAULT_BATCH_SIZE, 100);
    /// ```
    pub const DEFAULT_BATCH_SIZE: u32 = 100;

    /// Time between sweeps unless [`interval`](Self::interval) says otherwise: keys live
    /// 24 hours at least, so a minute late is nothing, and an idle sweep costs one index
    /// probe.
    ///
    /// ```
    /// assert_eq!(idem_runtime::admin::Expiry::DEFAULT_INTERVAL.as_secs(), 60);
    /// ```
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

    /// Pause between batches unless [`pause`](Self::pause) says otherwise: about as long
    /// as a batch of 100 takes, so a sweep with a large backlog keeps one connection
    /// busy about half the time, and still deletes some 12 000 rows/s (a billion keys a
    /// day).
    ///
    /// ```
    /// assert_eq!(idem_runtime::admin::Expiry::DEFAULT_PAUSE.as_millis(), 5);
    /// ```
    pub const DEFAULT_PAUSE: Duration = Duration::from_millis(5);
}

impl<DB: Backend> Expiry<DB> {
    /// An expiry task on `pool`: a sweep every 60 s, batches of 100 rows, 5 ms between
    /// batches.
    ///
    /// ```
    /// # fn build(pool: sqlx::PgPool) {
    /// let expiry = idem_runtime::admin::Expiry::new(pool);
    /// # }
    /// ```
    pub fn new(pool: Pool<DB>) -> Self {
        Self {
            pool,
            interval: Expiry::DEFAULT_INTERVAL,
            batch_size: Expiry::DEFAULT_BATCH_SIZE,
            pause: Expiry::DEFAULT_PAUSE,
            script: DB::batch_statement(Expiry::DEFAULT_BATCH_SIZE).into(),
            inbox_script: DB::inbox_batch_statement(Expiry::DEFAULT_BATCH_SIZE).into(),
            orphans_script: DB::orphans_batch_statement(Expiry::DEFAULT_BATCH_SIZE).map(Into::into),
            stats: Arc::default(),
        }
    }

    /// Time from the end of one sweep to the start of the next (default 60 s).
    ///
    /// ```
    /// # fn build(pool: sqlx::PgPool) {
    /// let expiry = idem_runtime::admin::Expiry::new(pool).interval(std::time::Duration::from_secs(300));
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
    /// let expiry = idem_runtime::admin::Expiry::new(pool).batch_size(500);
    /// # }
    /// ```
    pub fn batch_size(mut self, rows: u32) -> Self {
        assert!(rows > 0, "the expiry batch size must be at least 1");
        self.batch_size = rows;
        self.script = DB::batch_statement(rows).into();
        self.inbox_script = DB::inbox_batch_statement(rows).into();
        self.orphans_script = DB::orphans_batch_statement(rows).map(Into::into);
        self
    }

    /// Pause between two batches of one sweep (default 5 ms), so a large backlog is
    /// worked off without starving the application's own queries.
    ///
    /// ```
    /// # fn build(pool: sqlx::PgPool) {
    /// let expiry = idem_runtime::admin::Expiry::new(pool).pause(std::time::Duration::from_millis(100));
    /// # }
    /// ```
    pub fn pause(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }

    /// Totals of every sweep run by this value and its clones, for export as metrics.
    ///
    /// ```
    /// # fn export(expiry: &idem_runtime::admin::Expiry<sqlx::Postgres>) {
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
    /// # async fn sweep(pool: sqlx::PgPool) -> Result<(), idem_runtime::admin::SweepError> {
    /// let report = idem_runtime::admin::Expiry::new(pool).sweep_once().await?;
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
    /// # async fn sweep(pool: sqlx::PgPool) -> Result<(), idem_runtime::admin::SweepError> {
    /// let expiry = idem_runtime::admin::Expiry::new(pool);
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
    /// let due = idem_runtime::admin::Expiry::new(pool).count_deletable().await?;
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
    /// let plan = idem_runtime::admin::Expiry::new(pool).explain().await?;
    /// assert!(plan.contains("idem_keys_expires_at"), "{plan}");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn explain(&self) -> Result<String, sqlx::Error> {
        Ok(DB::explain_batch(&self.pool, self.batch_size)
            .await?
            .join("\n"))
    }

    /// One sweep, ending early when `stop` completes during a pause: the key table's
    /// batches, then the consumer inbox's ([`Inbox`](crate::Inbox)), then the staged
    /// bodies no completion will take, counted together.
    pub(super) async fn sweep(
        &self,
        mut stop: Pin<&mut impl Future<Output = ()>>,
        mut on_batch: impl FnMut(&SweepReport),
    ) -> SweepOutcome {
        let started = Instant::now();
        let mut report = SweepReport::default();
        let pace = Pace {
            batch_size: self.batch_size,
            pause: self.pause,
        };
        let mut deleted = |rows: u64, took: Duration| {
            report.batches += 1;
            report.rows_deleted += rows;
            report.longest_batch = report.longest_batch.max(took);
            // Totals grow batch by batch, so a long sweep shows progress in metrics.
            self.update_stats(|stats| {
                stats.batches += 1;
                stats.rows_deleted += rows;
            });
            on_batch(&report);
        };
        let (pool, keys, inbox) = (&self.pool, &*self.script, &*self.inbox_script);
        let mut table = "idem_keys";
        let mut ended = batches::run(
            pace,
            stop.as_mut(),
            || DB::delete_batch(pool, keys),
            &mut deleted,
        )
        .await;
        // The inbox's entries go once the keys are drained; a sweep stopped or failed on
        // the keys leaves them to the next one.
        if let Ended::Drained = ended {
            table = "idem_inbox";
            ended = batches::run(
                pace,
                stop.as_mut(),
                || DB::delete_expired_deliveries(pool, inbox),
                &mut deleted,
            )
            .await;
        }
        // Then the staged bodies no completion will take, where there can be any.
        if let (Ended::Drained, Some(orphans)) = (&ended, self.orphans_script.as_deref()) {
            table = "idem_staged_bodies";
            ended = batches::run(
                pace,
                stop.as_mut(),
                || DB::delete_batch(pool, orphans),
                &mut deleted,
            )
            .await;
        }
        let stopped = match ended {
            Ended::Drained => false,
            Ended::Stopped => true,
            Ended::Failed(error) => {
                report.duration = started.elapsed();
                self.update_stats(|stats| stats.failed_sweeps += 1);
                tracing::warn!(
                    target: TRACE_TARGET,
                    error = %error,
                    table,
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
                target: TRACE_TARGET,
                rows_deleted = report.rows_deleted,
                batches = report.batches,
                duration_ms,
                longest_batch_ms = report.longest_batch.as_secs_f64() * 1e3,
                stopped,
                "idem expiry sweep",
            );
        } else {
            tracing::debug!(
                target: TRACE_TARGET,
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
                crate::protocol::metrics::stranded(stranded, oldest_age);
                if stranded > 0 {
                    tracing::warn!(
                        target: TRACE_TARGET,
                        stranded,
                        oldest_age_s = oldest_age.map(|age| age.as_secs()),
                        "idem keys in progress past their retention are kept, not deleted: \
                         list them with `idem stranded` and resolve them",
                    );
                }
            }
            Err(error) => {
                tracing::warn!(target: TRACE_TARGET, %error, "idem expiry: counting stranded keys failed")
            }
        }
    }

    fn update_stats(&self, update: impl FnOnce(&mut ExpiryStats)) {
        update(&mut self.stats.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

pub(super) struct SweepOutcome {
    result: Result<SweepReport, SweepError>,
    /// The stop signal (or the pool's closing) ended the sweep.
    pub(super) stopped: bool,
}
