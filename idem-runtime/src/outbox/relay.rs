//! The relay: what it is configured with, and the task that runs it until stopped.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use sqlx::Pool;
use tokio::sync::watch;

use super::message::Message;
use crate::maintenance::{OnPanic, TaskHandle};
use crate::store::Backend;
use crate::store::choice::{DefaultBackend, HeldPool};

/// How often a running relay deletes messages delivered longer ago than
/// [`Relay::keep_delivered`].
const PURGE_EVERY: Duration = Duration::from_secs(60);

/// Delivers outbox messages at least once to an application's async handler.
///
/// The application spawns it and keeps the [`RelayHandle`]; several relays (one per
/// instance) may share one database. Each message is delivered by one relay at a time for
/// as long as that relay is alive and renewing its hold (every third of the
/// [`delivery_timeout`](Self::delivery_timeout)), however long the handler takes; a relay
/// that dies has its message delivered again by another, one timeout after its last
/// renewal. A handler that returns `Err` (or panics) gets the message again later, with a
/// growing delay; one that returns `Ok` has it marked delivered. Each relay delivers in
/// the order the messages were written, except that a failed one is retried later, and a
/// message of a batch that waits longer than the timeout for its turn may go to an idle
/// relay instead.
///
/// ```no_run
/// # async fn start(pool: sqlx::PgPool) {
/// let relay = idem_runtime::outbox::Relay::new(pool).spawn(|message: idem_runtime::outbox::Message| async move {
///     println!("{} {}: {}", message.topic(), message.id(), message.payload());
///     Ok::<_, std::io::Error>(())
/// });
/// // ... serve ...
/// relay.stop().await;
/// # }
/// ```
///
/// # One relay at a time
///
/// Several relays may share one database. A relay takes a batch of due messages under a
/// token fresh for that take (the message's `holder`), which hides the batch from other
/// relays for one [`delivery_timeout`](Relay::delivery_timeout). Right before handing a
/// message to the application it claims that message alone: the claim counts the attempt
/// and hides the message for another timeout, and it fails, so the relay skips the
/// message, when another relay took it after this batch's hold ran out. While the
/// application's handler runs, the relay renews that message's hold every third of the
/// timeout. Marking the message delivered or failed, and giving back the rest of a batch
/// on stop, are fenced by the token as well: they change nothing once another take has
/// replaced it.
///
/// So while a relay is alive and renewing, no other relay delivers the message it is
/// delivering, however long the handler takes, and a relay whose hold ran out can neither
/// mark, fail, give back nor count a delivery another relay now runs.
///
/// # When a relay dies
///
/// A relay that dies (or hangs long enough to miss its renewals) leaves its message due
/// one timeout after its last renewal; another relay then delivers it again, as the next
/// [`attempt`](Message::attempt), with the same id. So delivery is at least once across
/// crashes, not exactly once: a relay that dies after the consumer acted but before
/// marking the message delivered has it delivered again, and a relay stalled for longer
/// than the timeout (a paused process, a database it cannot reach) may find the message
/// delivered elsewhere while its own handler still runs. Consumers deduplicate by the id.
pub struct Relay<DB: crate::store::choice::ChosenBackend<'static> = DefaultBackend> {
    /// Not a bare `Pool<DB>`, which would give a bare `Relay` a second error (see
    /// [`HeldPool`]).
    pub(super) pool: HeldPool<DB>,
    pub(super) batch_size: u32,
    pub(super) poll_interval: Duration,
    pub(super) delivery_timeout: Duration,
    pub(super) first_retry: Duration,
    pub(super) max_retry: Duration,
    pub(super) keep_delivered: Duration,
}

impl<DB: Backend> Relay<DB> {
    /// A relay over idem's outbox in `pool`'s database (PostgreSQL or SQLite).
    ///
    /// Defaults: batches of 32 messages, a poll every 500 ms when the outbox is empty, a
    /// delivery timeout of 60 s, retries after 1 s doubling up to 5 min, and delivered
    /// messages kept for 24 h.
    ///
    /// ```
    /// # fn f(pool: sqlx::PgPool) {
    /// let relay = idem_runtime::outbox::Relay::new(pool);
    /// # let _ = relay;
    /// # }
    /// ```
    pub fn new(pool: Pool<DB>) -> Self {
        Self {
            pool: HeldPool::new(pool),
            batch_size: 32,
            poll_interval: Duration::from_millis(500),
            delivery_timeout: Duration::from_secs(60),
            first_retry: Duration::from_secs(1),
            max_retry: Duration::from_secs(300),
            keep_delivered: Duration::from_secs(24 * 60 * 60),
        }
    }

    /// How many messages one round takes at most.
    ///
    /// ```
    /// # fn f(pool: sqlx::PgPool) {
    /// let relay = idem_runtime::outbox::Relay::new(pool).batch_size(100);
    /// # let _ = relay;
    /// # }
    /// ```
    ///
    /// # Panics
    /// If `size` is zero.
    pub fn batch_size(mut self, size: u32) -> Self {
        assert!(size > 0, "idem: a relay's batch size must be at least 1");
        self.batch_size = size;
        self
    }

    /// How long the relay sleeps when it found nothing to deliver.
    ///
    /// ```
    /// # fn f(pool: sqlx::PgPool) {
    /// let relay = idem_runtime::outbox::Relay::new(pool).poll_interval(std::time::Duration::from_millis(100));
    /// # let _ = relay;
    /// # }
    /// ```
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long a relay's hold on a message lasts without renewal.
    ///
    /// A batch the relay takes is hidden from other relays for this long; a message whose
    /// turn comes later than that may have gone to another relay, and is then skipped.
    /// Each message's delivery starts a hold of its own, renewed every third of this
    /// time while the handler runs, so a slow handler never sees its message delivered
    /// elsewhere meanwhile. A relay that dies mid-delivery, or stops running for longer
    /// than this (its renewals miss), has the message delivered again by another relay
    /// this long after its last renewal.
    ///
    /// ```
    /// # fn f(pool: sqlx::PgPool) {
    /// let relay = idem_runtime::outbox::Relay::new(pool).delivery_timeout(std::time::Duration::from_secs(300));
    /// # let _ = relay;
    /// # }
    /// ```
    ///
    /// # Panics
    /// If `timeout` is zero.
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        assert!(
            !timeout.is_zero(),
            "idem: a relay's delivery timeout must be longer than zero"
        );
        self.delivery_timeout = timeout;
        self
    }

    /// The delay before a failed message is retried, doubled on every further failure
    /// up to `max`.
    ///
    /// ```
    /// # fn f(pool: sqlx::PgPool) {
    /// use std::time::Duration;
    /// let relay = idem_runtime::outbox::Relay::new(pool)
    ///     .retry_backoff(Duration::from_secs(5), Duration::from_secs(3600));
    /// # let _ = relay;
    /// # }
    /// ```
    pub fn retry_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.first_retry = first;
        self.max_retry = max.max(first);
        self
    }

    /// How long delivered messages stay in the table (for auditing) before the relay
    /// deletes them.
    ///
    /// ```
    /// # fn f(pool: sqlx::PgPool) {
    /// let week = std::time::Duration::from_secs(7 * 24 * 60 * 60);
    /// let relay = idem_runtime::outbox::Relay::new(pool).keep_delivered(week);
    /// # let _ = relay;
    /// # }
    /// ```
    pub fn keep_delivered(mut self, age: Duration) -> Self {
        self.keep_delivered = age;
        self
    }

    /// Starts delivering on the current Tokio runtime until [`TaskHandle::stop`] is
    /// called, the handle is dropped, or the pool is closed.
    ///
    /// The handler gets each message by value and returns `Ok(())` once the message is
    /// handled (written to the consumer's own table, sent to a broker, ...); its futures
    /// are `Send` because the relay runs on `tokio::spawn`. Database errors of the relay
    /// itself are logged and retried after the poll interval.
    ///
    /// ```no_run
    /// # async fn start(pool: sqlx::PgPool) {
    /// let sink = pool.clone();
    /// let relay = idem_runtime::outbox::Relay::new(pool).spawn(move |message: idem_runtime::outbox::Message| {
    ///     let sink = sink.clone();
    ///     async move {
    ///         // Deduplicate by the message id: delivery is at least once.
    ///         sqlx::query("INSERT INTO sent (message_id) VALUES ($1::uuid) ON CONFLICT DO NOTHING")
    ///             .bind(message.id().to_owned())
    ///             .execute(&sink)
    ///             .await
    ///             .map(drop)
    ///     }
    /// });
    /// relay.stop().await;
    /// # }
    /// ```
    #[must_use = "dropping the handle stops the relay"]
    pub fn spawn<H, Fut, E>(self, handler: H) -> RelayHandle
    where
        H: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        TaskHandle::spawn((), OnPanic::Log("outbox relay panicked"), |stop| {
            self.run(handler, stop)
        })
    }

    async fn run<H, Fut, E>(self, handler: H, mut stop: watch::Receiver<bool>)
    where
        H: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        let mut last_purge: Option<Instant> = None;
        while !stopped(&stop) && !self.pool.is_closed() {
            let taken = match self.deliver_batch(&handler, Some(&stop)).await {
                Ok(taken) => taken,
                Err(error) => {
                    if self.pool.is_closed() {
                        break;
                    }
                    tracing::warn!(%error, "outbox relay: database error; retrying");
                    0
                }
            };
            if last_purge.is_none_or(|at| at.elapsed() >= PURGE_EVERY) {
                last_purge = Some(Instant::now());
                if let Err(error) = self.purge().await {
                    tracing::warn!(%error, "outbox relay: purging delivered messages failed");
                }
            }
            // A full batch suggests more are due: go on at once.
            if taken >= self.batch_size as usize {
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(self.poll_interval) => {}
                _ = stop.changed() => {}
            }
        }
    }
}

/// Set by `stop`, or implied when the handle is gone.
pub(super) fn stopped(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow() || stop.has_changed().is_err()
}

impl<DB: Backend> fmt::Debug for Relay<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Relay")
            .field("batch_size", &self.batch_size)
            .field("poll_interval", &self.poll_interval)
            .field("delivery_timeout", &self.delivery_timeout)
            .field("first_retry", &self.first_retry)
            .field("max_retry", &self.max_retry)
            .field("keep_delivered", &self.keep_delivered)
            .finish_non_exhaustive()
    }
}

/// The running relay of [`Relay::spawn`]: a [`TaskHandle`]. Its
/// [`stop`](TaskHandle::stop) finishes and marks the message being delivered and gives
/// the rest of the batch back for the next relay.
///
/// ```no_run
/// # async fn f(relay: idem_runtime::outbox::RelayHandle) {
/// if relay.is_finished() {
///     tracing::error!("the outbox relay stopped; messages wait");
/// }
/// relay.stop().await;
/// # }
/// ```
pub type RelayHandle = TaskHandle;
