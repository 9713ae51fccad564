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

use serde::Serialize;

use crate::protocol::tx::Tx;
use crate::store::Backend;

mod delivery;
mod message;
mod relay;

pub use message::Message;
pub use relay::{Relay, RelayHandle};

impl<DB: Backend> Tx<'_, DB> {
    /// Writes a message for [`Relay`] to deliver, in this transaction: it is sent only if
    /// the transaction commits, and exactly one message exists however often the request
    /// is retried. Returns the message's id, which every delivery of it carries.
    ///
    /// Works in both forms: in the single transaction of an `#[idempotent]` handler, and
    /// in a phase of the phased form.
    ///
    /// ```
    /// # async fn f(tx: &mut idem_runtime::Tx<'_, sqlx::Postgres>, order_id: i64) -> sqlx::Result<()> {
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
