//! The operator's views of the key table: counts and sizes, and one key's row.

use sqlx::Pool;

use crate::store::{BODY_PREVIEW_BYTES, Backend, KeyRecord, KeyStats};

/// Counts of the key table by state and age, the oldest key in progress, and its size on
/// disk. Scans the whole table: meant for an operator, not for a metrics scrape.
///
/// ```no_run
/// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// let stats = idem_runtime::admin::key_stats(&pool).await?;
/// for state in &stats.states {
///     println!("{}: {}", state.state, state.ages.total);
/// }
/// println!("{} due for deletion, table {} bytes", stats.deletable, stats.table_bytes);
/// # Ok(())
/// # }
/// ```
pub async fn key_stats<DB: Backend>(pool: &Pool<DB>) -> Result<KeyStats, sqlx::Error> {
    DB::key_stats(pool).await
}

/// One key's row: its state, the request it was claimed for and the stored response,
/// with only the first [`BODY_PREVIEW_BYTES`] of the body. `None` when there is no
/// such key (in progress keys of the single-transaction form are not visible until
/// their transaction commits).
///
/// `key` is the key as stored: the bare form, without the quotes of a Structured Field
/// string ([`IdempotencyKey::parse`](crate::IdempotencyKey::parse) gives it).
///
/// ```no_run
/// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// if let Some(record) = idem_runtime::admin::inspect_key(&pool, "1001", "8e03978e-40d5").await? {
///     println!("{} {} -> {:?}", record.method, record.path, record.response_status);
/// }
/// # Ok(())
/// # }
/// ```
pub async fn inspect_key<DB: Backend>(
    pool: &Pool<DB>,
    scope: &str,
    key: &str,
) -> Result<Option<KeyRecord>, sqlx::Error> {
    DB::inspect_key(pool, scope, key, BODY_PREVIEW_BYTES).await
}
