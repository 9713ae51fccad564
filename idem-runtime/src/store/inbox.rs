//! The consumer inbox's statements: one trait, apart from [`Backend`](super::Backend)'s
//! request protocol, implemented per database in `postgres/inbox.rs` and
//! `sqlite/inbox.rs`.

use std::future::Future;
use std::time::Duration;

use sqlx::Pool;

/// A database that can hold the consumer inbox (`idem_inbox`). Every
/// [`Backend`](super::Backend) is one; sealed like it.
pub trait InboxStore: sqlx::Database + super::sealed::Sealed {
    /// Writes the row for `(consumer, message_id)` in the caller's transaction: `true`
    /// when this is the message's first delivery (no row, or only an expired one),
    /// `false` when a committed row says it was processed. A concurrent first delivery
    /// in another open transaction is waited for (PostgreSQL's unique index; SQLite's one
    /// writer), so exactly one of the two sees `true` once the first commits.
    #[doc(hidden)]
    fn record_delivery(
        conn: &mut Self::Connection,
        consumer: &str,
        message_id: &str,
        retention: Duration,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// The statement of one batch of the sweep, deleting up to `batch_size` expired
    /// entries. The size is a literal, so the statement takes no parameter: built once
    /// per [`Expiry`](crate::admin::Expiry), like the key table's batch.
    #[doc(hidden)]
    fn inbox_batch_statement(batch_size: u32) -> String;

    /// Runs one batch of the sweep, as built by
    /// [`inbox_batch_statement`](Self::inbox_batch_statement); the rows deleted.
    #[doc(hidden)]
    fn delete_expired_deliveries(
        pool: &Pool<Self>,
        statement: &str,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;
}
