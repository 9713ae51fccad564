//! The expiry sweep as a background task: [`Expiry::run`] for a future the application
//! spawns, [`Expiry::spawn`] for one idem spawns, stopped through its handle.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Weak};

use super::report::ExpiryStats;
use super::sweep::Expiry;
use super::task::{OnPanic, TaskHandle, stopped};
use crate::store::Backend;
use crate::store::choice::DefaultBackend;

impl<DB: Backend> Expiry<DB> {
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
    /// let task = tokio::spawn(idem_runtime::admin::Expiry::new(pool).run(async {
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
    /// handle's [`stop`](TaskHandle::stop) or when the handle is dropped.
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
    /// let handle = idem_runtime::admin::Expiry::new(pool).spawn();
    /// // ... serve; export handle.stats() ...
    /// handle.stop().await;
    /// # }
    /// ```
    pub fn spawn(self) -> ExpiryHandle<DB> {
        let expiry = Arc::new(self);
        let weak = Arc::downgrade(&expiry);
        // A dropped handle ends the stop signal too: dropping the handle stops the task.
        TaskHandle::spawn(expiry, OnPanic::Resume, |stop| {
            run_until(weak, stopped(stop))
        })
    }
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

/// The running expiry task of [`Expiry::spawn`]: a [`TaskHandle`] that also reads the
/// sweep's statistics.
///
/// ```no_run
/// # async fn start(pool: sqlx::PgPool) {
/// let handle: idem_runtime::admin::ExpiryHandle<sqlx::Postgres> = idem_runtime::admin::Expiry::new(pool).spawn();
/// handle.stop().await;
/// # }
/// ```
pub type ExpiryHandle<DB = DefaultBackend> = TaskHandle<Arc<Expiry<DB>>>;

impl<DB: Backend> TaskHandle<Arc<Expiry<DB>>> {
    /// Totals of the task's sweeps so far; see [`Expiry::stats`].
    ///
    /// ```no_run
    /// # fn export(handle: &idem_runtime::admin::ExpiryHandle<sqlx::Postgres>) {
    /// let stats = handle.stats();
    /// println!("idem_expiry_sweeps_total {}", stats.sweeps);
    /// println!("idem_expiry_failed_sweeps_total {}", stats.failed_sweeps);
    /// # }
    /// ```
    pub fn stats(&self) -> ExpiryStats {
        self.state().stats()
    }
}
