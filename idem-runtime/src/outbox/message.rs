//! One outbox message, as the relay hands it to the application's handler.

use serde::de::DeserializeOwned;

use crate::store::OutboxRow;

/// One outbox message, as the relay hands it to the application.
///
/// ```
/// # async fn f(message: idem_runtime::outbox::Message) {
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
    pub(super) fn from_row(row: OutboxRow, attempt: i32) -> Self {
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
    /// # fn f(message: &idem_runtime::outbox::Message, seen: &mut std::collections::HashSet<String>) {
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
    /// # fn f(message: &idem_runtime::outbox::Message) {
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
    /// # fn f(message: &idem_runtime::outbox::Message) -> serde_json::Result<()> {
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
    /// # fn f(message: &idem_runtime::outbox::Message) -> serde_json::Result<()> {
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
    /// # fn f(message: &idem_runtime::outbox::Message) {
    /// if message.attempt() > 5 {
    ///     tracing::warn!(message = message.id(), "still failing");
    /// }
    /// # }
    /// ```
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}
