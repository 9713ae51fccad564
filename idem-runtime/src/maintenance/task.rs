//! The one lifecycle of idem's background tasks, the expiry sweep and the outbox relay:
//! spawned on the Tokio runtime, stopped through their [`TaskHandle`].

use std::fmt;
use std::future::Future;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A background task of idem's, running on the Tokio runtime: the expiry sweep
/// ([`Expiry::spawn`](crate::admin::Expiry::spawn), whose handle also reads the sweep's
/// statistics) or the outbox relay ([`Relay::spawn`](crate::outbox::Relay::spawn)).
///
/// Dropping the handle stops the task too, but without waiting for it: call
/// [`stop`](Self::stop) at shutdown.
///
/// ```no_run
/// # async fn start(pool: sqlx::PgPool) {
/// let handle = idem_runtime::admin::Expiry::new(pool).spawn();
/// assert!(!handle.is_finished());
/// handle.stop().await;
/// # }
/// ```
#[must_use = "the task stops when its handle is dropped"]
pub struct TaskHandle<T = ()> {
    /// What the task shares with its handle (the expiry's statistics).
    state: T,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    on_panic: OnPanic,
}

/// What [`TaskHandle::stop`] does when the task panicked.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OnPanic {
    /// Panics again in the caller of `stop`: the task's panic is the caller's bug.
    Resume,
    /// Logs the message and returns: the caller is shutting down anyway.
    Log(&'static str),
}

impl<T> TaskHandle<T> {
    /// Spawns `task`, which gets the stop signal: it turns `true` on [`stop`](Self::stop),
    /// and its sender is gone once the handle is dropped.
    pub(crate) fn spawn<F>(
        state: T,
        on_panic: OnPanic,
        task: impl FnOnce(watch::Receiver<bool>) -> F,
    ) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(task(stopped));
        Self {
            state,
            stop,
            task,
            on_panic,
        }
    }

    /// What the task shares with its handle.
    pub(crate) fn state(&self) -> &T {
        &self.state
    }

    /// Whether the task has ended (stopped, or its pool was closed).
    ///
    /// ```no_run
    /// # async fn check(pool: sqlx::PgPool) {
    /// let handle = idem_runtime::admin::Expiry::new(pool.clone()).spawn();
    /// pool.close().await;
    /// # tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    /// assert!(handle.is_finished());
    /// # }
    /// ```
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the task and waits for it to end. The expiry sweep stops at once when it is
    /// sleeping, after the batch in flight when it is sweeping; the relay finishes and
    /// marks the message being delivered and gives the rest of its batch back for the
    /// next relay.
    ///
    /// ```no_run
    /// # async fn shutdown(handle: idem_runtime::admin::ExpiryHandle<sqlx::Postgres>) {
    /// handle.stop().await;
    /// # }
    /// ```
    pub async fn stop(self) {
        let Self {
            state,
            stop,
            task,
            on_panic,
        } = self;
        let _ = stop.send(true);
        if let Err(error) = task.await
            && error.is_panic()
        {
            match on_panic {
                OnPanic::Resume => std::panic::resume_unwind(error.into_panic()),
                OnPanic::Log(message) => tracing::error!("{message}"),
            }
        }
        drop(state);
    }
}

impl<T: fmt::Debug> fmt::Debug for TaskHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskHandle")
            .field("state", &self.state)
            .field("finished", &self.is_finished())
            .finish_non_exhaustive()
    }
}

/// Resolves once the stop signal is set or its handle is gone.
pub(crate) async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|&stopped| stopped).await;
}
