//! The consumer inbox on PostgreSQL.

use std::time::Duration;

use sqlx::{AssertSqlSafe, PgConnection, PgPool, Postgres};

use crate::store::inbox::InboxStore;

/// Inserts the entry, or renews one whose retention ended (the message is new again, as
/// a key past its retention is); a live entry is left alone and no row is affected. A
/// concurrent insert of the same entry waits on the primary key for the other
/// transaction, then sees its row (or, if it rolled back, inserts).
const RECORD: &str = "\
INSERT INTO idem_inbox (consumer, message_id, received_at, expires_at)
VALUES ($1, $2, now(), now() + $3::interval)
ON CONFLICT (consumer, message_id) DO UPDATE
    SET received_at = excluded.received_at, expires_at = excluded.expires_at
    WHERE idem_inbox.expires_at <= now()";

impl InboxStore for Postgres {
    async fn record_delivery(
        conn: &mut PgConnection,
        consumer: &str,
        message_id: &str,
        retention: Duration,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(RECORD)
            .bind(consumer)
            .bind(message_id)
            .bind(retention)
            .execute(conn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// One batch, skipping entries a consumer's open transaction has locked.
    fn inbox_batch_statement(batch_size: u32) -> String {
        format!(
            "DELETE FROM idem_inbox WHERE (consumer, message_id) IN (
    SELECT consumer, message_id FROM idem_inbox WHERE expires_at <= now()
    ORDER BY expires_at LIMIT {batch_size} FOR UPDATE SKIP LOCKED)"
        )
    }

    /// The batch runs outside any transaction, so it goes as one simple query: behind a
    /// transaction pooler (PgBouncer 1.18) a statement sqlx prepares in one round trip is
    /// gone from the server connection by the next, and the sweep failed with `prepared
    /// statement "sqlx_s_1" does not exist`. One round trip, as the key table's batch.
    async fn delete_expired_deliveries(pool: &PgPool, statement: &str) -> Result<u64, sqlx::Error> {
        let done = sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(pool)
            .await?;
        Ok(done.rows_affected())
    }
}
