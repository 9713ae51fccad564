//! The consumer inbox: exactly-once effects for at-least-once messages.

use std::sync::Arc;
use std::time::Duration;

use sqlx::Transaction;

use crate::store::Backend;

/// Answers "has this message been processed by this consumer?" inside the consumer's
/// own transaction, by writing a unique row `(consumer, message id)` in that transaction.
///
/// A queue or a relay delivers at least once: a consumer that dies after its effects but
/// before its acknowledgement gets the message again. With the inbox the effects and the
/// row commit together or not at all, so:
///
/// - a redelivery of a processed message gets [`Delivery::Duplicate`]: commit (nothing
///   to do) and acknowledge it, with no effect;
/// - a crash before the commit leaves no row, and the redelivery is
///   [`Delivery::First`] again;
/// - a concurrent delivery of the same message waits for the first one's transaction
///   and then sees the row (or, if it rolled back, processes the message).
///
/// It serves idem's own [`Relay`](crate::outbox::Relay) messages consumed in another service (by
/// [`Message::id`](crate::outbox::Message::id)), and any broker's message ids. Entries are kept
/// for the [`retention`](Self::retention) (7 days by default; longer than the broker's
/// redelivery horizon), then deleted by the [`Expiry`](crate::admin::Expiry) task; a message
/// redelivered after that counts as new.
///
/// ```
/// # async fn consume(pool: sqlx::PgPool, message_id: &str, payload: &str)
/// #     -> Result<(), sqlx::Error> {
/// use idem_runtime::{Delivery, Inbox};
///
/// let inbox = Inbox::new("billing");
/// let mut tx = pool.begin().await?;
/// if inbox.receive(&mut tx, message_id).await? == Delivery::First {
///     sqlx::query("INSERT INTO invoices (payload) VALUES ($1)")
///         .bind(payload)
///         .execute(&mut *tx)
///         .await?;
/// }
/// tx.commit().await?;
/// // Only now acknowledge the message to the broker.
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Inbox {
    consumer: Arc<str>,
    retention: Duration,
}

/// What [`Inbox::receive`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The message's first delivery to this consumer (that committed): apply its effects
    /// in the same transaction.
    First,
    /// Processed before, in a committed transaction: apply nothing, commit, acknowledge.
    Duplicate,
}

impl Delivery {
    /// Whether this is the first delivery, to be processed.
    ///
    /// ```
    /// assert!(idem_runtime::Delivery::First.is_first());
    /// assert!(!idem_runtime::Delivery::Duplicate.is_first());
    /// ```
    pub fn is_first(self) -> bool {
        self == Self::First
    }
}

impl Inbox {
    /// How long an entry is kept by default: a week, past the redelivery horizon of
    /// common brokers and webhook senders (which retry for up to three days).
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

    /// The longest message id accepted, in bytes.
    pub const MAX_ID_LEN: usize = 255;

    /// The inbox of the consumer named `consumer` (e.g. `"billing.receipts"`): each
    /// consumer processes a message once, whatever the others did.
    ///
    /// ```
    /// let inbox = idem_runtime::Inbox::new("billing");
    /// assert_eq!(inbox.consumer(), "billing");
    /// ```
    pub fn new(consumer: impl Into<String>) -> Self {
        Self {
            consumer: consumer.into().into(),
            retention: Self::DEFAULT_RETENTION,
        }
    }

    /// How long an entry is kept after its message was processed (default 7 days).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let inbox = idem_runtime::Inbox::new("billing").retention(Duration::from_secs(3 * 86_400));
    /// assert_eq!(inbox.retention_time(), Duration::from_secs(3 * 86_400));
    /// ```
    pub fn retention(self, retention: Duration) -> Self {
        Self { retention, ..self }
    }

    /// The consumer's name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// How long entries are kept.
    pub fn retention_time(&self) -> Duration {
        self.retention
    }

    /// Records `message_id` for this consumer in `tx`, the transaction that also writes
    /// the message's effects: [`Delivery::First`] if no committed transaction did so
    /// before, else [`Delivery::Duplicate`]. Commit `tx` before acknowledging the message.
    ///
    /// An empty id, or one longer than [`MAX_ID_LEN`](Self::MAX_ID_LEN), is refused with
    /// [`sqlx::Error::InvalidArgument`] and nothing is written: such a message cannot be
    /// told apart from others, and should go to the consumer's dead letters.
    pub async fn receive<DB: Backend>(
        &self,
        tx: &mut Transaction<'_, DB>,
        message_id: &str,
    ) -> Result<Delivery, sqlx::Error> {
        if message_id.is_empty() || message_id.len() > Self::MAX_ID_LEN {
            return Err(sqlx::Error::InvalidArgument(format!(
                "a message id for the inbox is 1 to {} bytes; this one has {}",
                Self::MAX_ID_LEN,
                message_id.len()
            )));
        }
        let first =
            DB::record_delivery(&mut **tx, &self.consumer, message_id, self.retention).await?;
        if first {
            Ok(Delivery::First)
        } else {
            tracing::debug!(
                consumer = %self.consumer,
                message_id,
                "message delivered again; processed before"
            );
            Ok(Delivery::Duplicate)
        }
    }
}
