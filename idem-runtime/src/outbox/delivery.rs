//! Delivering one batch: take it, claim each message alone, run the application's
//! handler while renewing the hold, then mark the message delivered or failed.

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use tokio::sync::{oneshot, watch};

use super::message::Message;
use super::relay::{Relay, stopped};
use crate::store::Backend;

/// Rows one purge statement deletes at most.
const PURGE_BATCH: u32 = 1_000;

/// The longest error text stored with a failed delivery.
const MAX_ERROR_LEN: usize = 2_000;

impl<DB: Backend> Relay<DB> {
    /// Takes one batch of due messages and delivers each to `handler`; returns how many
    /// it took. For applications that schedule delivery themselves; [`spawn`](Self::spawn)
    /// calls it in a loop.
    ///
    /// ```no_run
    /// # async fn f(relay: idem_runtime::outbox::Relay<sqlx::Postgres>) -> sqlx::Result<()> {
    /// let delivered = relay
    ///     .deliver_once(&|message: idem_runtime::outbox::Message| async move {
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

    pub(super) async fn deliver_batch<H, Fut, E>(
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
            let id = message.id().to_owned();
            let attempt = message.attempt();
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
        let id = message.id().to_owned();
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

    pub(super) async fn purge(&self) -> Result<(), sqlx::Error> {
        loop {
            let mut conn = self.pool.acquire().await?;
            let deleted = DB::purge_delivered(&mut conn, self.keep_delivered, PURGE_BATCH).await?;
            if deleted < u64::from(PURGE_BATCH) {
                return Ok(());
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
