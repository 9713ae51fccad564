//! The outbox: messages written in the same transaction as the rows they announce, and
//! the relay that delivers them at least once.
//!
//! A message written in a phase commits with the phase, and a committed phase never runs
//! again, so neither a replay nor a takeover writes it twice.
//!
//! Each message goes to one relay at a time while that relay is alive: a take marks its
//! batch with a fresh holder token, each delivery claims its message alone and renews the
//! hold beside the handler, and every later write names the token. The guarantees are
//! spelled out on [`Relay`], where users read them.

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Pool;
use tokio::sync::{oneshot, watch};

use crate::maintenance::{OnPanic, TaskHandle};
use crate::protocol::tx::Tx;
use crate::store::{Backend, DefaultBackend, OutboxRow};

/// How often a running relay deletes messages delivered longer ago than
/// [`Relay::keep_delivered`].
const PURGE_EVERY: Duration = Duration::from_secs(60);

/// Rows one purge statement deletes at most.
const PURGE_BATCH: u32 = 1_000;

/// The longest error text stored with a failed delivery.
const MAX_ERROR_LEN: usize = 2_000;

impl<DB: Backend> Tx<'_, DB> {
    /// Writes a message for [`Relay`] to deliver, in this transaction: it is sent only if
    /// the transaction commits, and exactly one message exists however often the request
    /// is retried. Returns the message's id, which every delivery of it carries.
    ///
    /// Works in both forms: in the single transaction of an `#[idempotent]` handler, and
    /// in a phase of the phased form.
    ///
    /// ```
    /// # async fn f(tx: &mut idem_runtime::Tx<'_>, order_id: i64) -> sqlx::Result<()> {
    /// let id = tx
    ///     .enqueue("order_confirmation", &serde_json::json!({ "order": order_id }))
    ///     .await?;
    /// assert_eq!(id.len(), 36);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// `topic` is 1 to 200 bytes; `payload` is stored as JSON.
    pub async fn enqueue<P: Serialize + ?Sized>(
        &mut self,
        topic: &str,
        payload: &P,
    ) -> Result<String, sqlx::Error> {
        let payload =
            serde_json::to_string(payload).map_err(|error| sqlx::Error::Encode(Box::new(error)))?;
        DB::enqueue(&mut **self, topic, &payload).await
    }
}

/// One outbox message, as the relay hands it to the application.
///
/// ```
/// # async fn f(message: idem_runtime::Message) {
/// println!(
///     "{} #{} (delivery {}): {}",
///     message.topic(),
///     message.id(),
///     message.attempt(),
///     message.payload()
/// );
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Message {
    id: String,
    topic: String,
    payload: String,
    attempt: u32,
}

impl Message {
    fn from_row(row: OutboxRow, attempt: i32) -> Self {
        Self {
            id: row.id,
            topic: row.topic,
            payload: row.payload,
            attempt: u32::try_from(attempt).unwrap_or(1),
        }
    }

    /// The message's id (a UUID), the same on every delivery: deduplicate by it.
    ///
    /// ```
    /// # fn f(message: &idem_runtime::Message, seen: &mut std::collections::HashSet<String>) {
    /// if !seen.insert(message.id().to_owned()) {
    ///     return; // delivered before
    /// }
    /// # }
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The topic it was enqueued with.
    ///
    /// ```
    /// # fn f(message: &idem_runtime::Message) {
    /// match message.topic() {
    ///     "receipts" => { /* ... */ }
    ///     _ => { /* not for this consumer */ }
    /// }
    /// # }
    /// ```
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The payload as JSON text.
    ///
    /// ```
    /// # fn f(message: &idem_runtime::Message) -> serde_json::Result<()> {
    /// let value: serde_json::Value = serde_json::from_str(message.payload())?;
    /// # let _ = value;
    /// # Ok(())
    /// # }
    /// ```
    pub fn payload(&self) -> &str {
        &self.payload
    }

    /// The payload read as `T`.
    ///
    /// ```
    /// # fn f(message: &idem_runtime::Message) -> serde_json::Result<()> {
    /// #[derive(serde::Deserialize)]
    /// struct Receipt {
    ///     payment_id: i64,
    /// }
    /// let receipt: Receipt = message.payload_as()?;
    /// # let _ = receipt.payment_id;
    /// # Ok(())
    /// # }
    /// ```
    pub fn payload_as<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(&self.payload)
    }

    /// Which delivery this is: how many deliveries of this message have started, this one
    /// included. 1 the first time; one more after each failure (an `Err` or a panic) and
    /// after each relay that died or lost its hold mid-delivery. A message a relay took
    /// but gave back or lost before handing it out counts nothing.
    ///
    /// ```
    /// # fn f(message: &idem_runtime::Message) {
    /// if message.attempt() > 5 {
    ///     tracing::warn!(message = message.id(), "still failing");
    /// }
    /// # }
    /// ```
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

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
/// let relay = idem_runtime::Relay::new(pool).spawn(|message: idem_runtime::Message| async move {
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
pub struct Relay<DB: Backend = DefaultBackend> {
    pool: Pool<DB>,
    batch_size: u32,
    poll_interval: Duration,
    delivery_timeout: Duration,
    first_retry: Duration,
    max_retry: Duration,
    keep_delivered: Duration,
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
    /// let relay = idem_runtime::Relay::new(pool);
    /// # let _ = relay;
    /// # }
    /// ```
    pub fn new(pool: Pool<DB>) -> Self {
        Self {
            pool,
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
    /// let relay = idem_runtime::Relay::new(pool).batch_size(100);
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
    /// let relay = idem_runtime::Relay::new(pool).poll_interval(std::time::Duration::from_millis(100));
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
    /// let relay = idem_runtime::Relay::new(pool).delivery_timeout(std::time::Duration::from_secs(300));
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
    /// let relay = idem_runtime::Relay::new(pool)
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
    /// let relay = idem_runtime::Relay::new(pool).keep_delivered(week);
    /// # let _ = relay;
    /// # }
    /// ```
    pub fn keep_delivered(mut self, age: Duration) -> Self {
        self.keep_delivered = age;
        self
    }

    /// Takes one batch of due messages and delivers each to `handler`; returns how many
    /// it took. For applications that schedule delivery themselves; [`spawn`](Self::spawn)
    /// calls it in a loop.
    ///
    /// ```no_run
    /// # async fn f(relay: idem_runtime::Relay) -> sqlx::Result<()> {
    /// let delivered = relay
    ///     .deliver_once(&|message: idem_runtime::Message| async move {
    ///         println!("{}", message.id());
    ///         Ok::<_, std::io::Error>(())
    ///     })
    ///     .await?;
    /// # let _ = delivered;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn deliver_once<H, Fut, E>(&self, handler: &H) -> Result<usize, sqlx::Error>
    where
        H: Fn(Message) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: fmt::Display,
    {
        self.deliver_batch(handler, None).await
    }

    async fn deliver_batch<H, Fut, E>(
        &self,
        handler: &H,
        stop: Option<&watch::Receiver<bool>>,
    ) -> Result<usize, sqlx::Error>
    where
        H: Fn(Message) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: fmt::Display,
    {
        let holder = new_holder();
        let rows = {
            let mut conn = self.pool.acquire().await?;
            DB::take_messages(&mut conn, self.batch_size, self.delivery_timeout, holder).await?
        };
        let taken = rows.len();
        let mut rows = rows.into_iter();
        while let Some(row) = rows.next() {
            if stop.is_some_and(stopped) {
                // Give the rest back rather than leave them hidden until the timeout.
                let ids: Vec<String> = std::iter::once(row.id)
                    .chain(rows.map(|row| row.id))
                    .collect();
                let mut conn = self.pool.acquire().await?;
                DB::release_messages(&mut conn, &ids, holder).await?;
                break;
            }
            // The take's hold covers the whole batch for one timeout; by the time this
            // message's turn comes it may have run out and another relay taken it.
            let claimed = {
                let mut conn = self.pool.acquire().await?;
                DB::claim_message(&mut conn, &row.id, holder, self.delivery_timeout).await?
            };
            let Some(attempt) = claimed else {
                tracing::debug!(message = %row.id, "outbox message taken by another relay meanwhile; skipped");
                continue;
            };
            let message = Message::from_row(row, attempt);
            let id = message.id.clone();
            let attempt = message.attempt;
            match self.handle(handler, message, holder).await {
                Ok(Ok(())) => {
                    let mut conn = self.pool.acquire().await?;
                    if !DB::mark_delivered(&mut conn, &id, holder).await? {
                        tracing::warn!(message = %id, attempt, "outbox message handled, but another relay took it first and delivers it again");
                    }
                }
                Ok(Err(error)) => {
                    let error = error.to_string();
                    tracing::warn!(message = %id, attempt, %error, "outbox delivery failed; will retry");
                    self.failed(&id, holder, attempt, &error).await?;
                }
                Err(_) => {
                    tracing::error!(message = %id, attempt, "outbox handler panicked; will retry");
                    self.failed(&id, holder, attempt, "the handler panicked")
                        .await?;
                }
            }
        }
        Ok(taken)
    }

    /// Runs the application's handler on one message while renewing the message's hold
    /// beside it, on the same task: the hold ends `delivery_timeout` after the last
    /// renewal, so only a relay that stopped running (died, or hung) loses its message.
    async fn handle<H, Fut, E>(
        &self,
        handler: &H,
        message: Message,
        holder: i64,
    ) -> std::thread::Result<Result<(), E>>
    where
        H: Fn(Message) -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        let id = message.id.clone();
        let (done, handled) = oneshot::channel::<()>();
        // A connection is held only for the bookkeeping, never while the application's
        // handler runs (it may need the pool itself).
        let handling = async move {
            let outcome = AssertUnwindSafe(handler(message)).catch_unwind().await;
            let _ = done.send(());
            outcome
        };
        let (outcome, ()) = tokio::join!(handling, self.keep_held(&id, holder, handled));
        outcome
    }

    /// Renews the hold every third of the timeout until `handled` fires. A renewal under
    /// way when the handler ends is finished, not dropped halfway through its statement.
    async fn keep_held(&self, id: &str, holder: i64, mut handled: oneshot::Receiver<()>) {
        let every = self.delivery_timeout / 3;
        loop {
            tokio::select! {
                _ = &mut handled => return,
                () = tokio::time::sleep(every) => {}
            }
            let renewed = match self.pool.acquire().await {
                Ok(mut conn) => {
                    DB::renew_message(&mut conn, id, holder, self.delivery_timeout).await
                }
                Err(error) => Err(error),
            };
            match renewed {
                Ok(true) => {}
                Ok(false) => {
                    // Renewing again cannot win the message back; marking it will fail too.
                    tracing::warn!(message = %id, "outbox hold ran out before it was renewed; another relay took the message and may deliver it at the same time");
                    return;
                }
                Err(error) => {
                    tracing::warn!(message = %id, %error, "outbox relay: renewing a hold failed; retrying");
                }
            }
        }
    }

    async fn failed(
        &self,
        id: &str,
        holder: i64,
        attempt: u32,
        error: &str,
    ) -> Result<(), sqlx::Error> {
        let doublings = attempt.saturating_sub(1).min(20);
        let delay = self
            .first_retry
            .saturating_mul(1 << doublings)
            .min(self.max_retry);
        let error: String = error.chars().take(MAX_ERROR_LEN).collect();
        let mut conn = self.pool.acquire().await?;
        if !DB::mark_failed(&mut conn, id, holder, delay, &error).await? {
            tracing::warn!(message = %id, attempt, "outbox message failed, but another relay took it first");
        }
        Ok(())
    }

    async fn purge(&self) -> Result<(), sqlx::Error> {
        loop {
            let mut conn = self.pool.acquire().await?;
            let deleted = DB::purge_delivered(&mut conn, self.keep_delivered, PURGE_BATCH).await?;
            if deleted < u64::from(PURGE_BATCH) {
                return Ok(());
            }
        }
    }
}

impl<DB: Backend> Relay<DB> {
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
    /// let relay = idem_runtime::Relay::new(pool).spawn(move |message: idem_runtime::Message| {
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

/// A token for one take: the output of a hasher with fresh random keys (std seeds them
/// from the operating system and varies them for every `RandomState`). A token only has
/// to differ from every other take's, which 64 random bits do but for a 1 in 2^64 chance,
/// and drawing it here costs no round trip to the database (SQLite has no sequences).
fn new_holder() -> i64 {
    let bits = RandomState::new().build_hasher().finish();
    i64::from_ne_bytes(bits.to_ne_bytes())
}

/// Set by `stop`, or implied when the handle is gone.
fn stopped(stop: &watch::Receiver<bool>) -> bool {
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
/// # async fn f(relay: idem_runtime::RelayHandle) {
/// if relay.is_finished() {
///     tracing::error!("the outbox relay stopped; messages wait");
/// }
/// relay.stop().await;
/// # }
/// ```
pub type RelayHandle = TaskHandle;
