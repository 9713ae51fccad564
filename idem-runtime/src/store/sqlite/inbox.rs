//! The consumer inbox on SQLite.

use std::time::Duration;

use sqlx::{AssertSqlSafe, Sqlite, SqliteConnection, SqlitePool};

use super::now;
use crate::store::inbox::InboxStore;

/// As on PostgreSQL: insert, or renew an entry whose retention ended; a live entry
/// affects no row. SQLite lets one writer in at a time, so a concurrent delivery's
/// transaction waits for the first one's to end.
const RECORD: &str = concat!(
    "INSERT INTO idem_inbox (consumer, message_id, received_at, expires_at) VALUES ($1, $2, ",
    now!(),
    ", ",
    now!(),
    " + $3) ON CONFLICT (consumer, message_id) DO UPDATE SET received_at = excluded.received_at, \
     expires_at = excluded.expires_at WHERE idem_inbox.expires_at <= ",
    now!()
);

impl InboxStore for Sqlite {
    async fn record_delivery(
        conn: &mut SqliteConnection,
        consumer: &str,
        message_id: &str,
        retention: Duration,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(RECORD)
            .bind(consumer)
            .bind(message_id)
            .bind(i64::try_from(retention.as_micros()).unwrap_or(i64::MAX))
            .execute(conn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// One batch, by `rowid`; as on PostgreSQL, the size is a literal.
    fn inbox_batch_statement(batch_size: u32) -> String {
        format!(
            concat!(
                "DELETE FROM idem_inbox WHERE rowid IN (SELECT rowid FROM idem_inbox \
                 WHERE expires_at <= ",
                now!(),
                " ORDER BY expires_at LIMIT {})"
            ),
            batch_size
        )
    }

    async fn delete_expired_deliveries(
        pool: &SqlitePool,
        statement: &str,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(AssertSqlSafe(statement.to_owned()))
            .execute(pool)
            .await?;
        Ok(done.rows_affected())
    }
}
