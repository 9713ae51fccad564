//! The outbox's SQL on SQLite: messages written in the caller's transaction, and the
//! relay's take / mark / release / purge.
//!
//! Each relay statement is one write in a transaction of its own, and SQLite runs one
//! writer at a time: two relays never take the same message, with no row locks needed.

use std::time::Duration;

use sqlx::sqlite::SqliteConnection;

use super::{micros, now};
use crate::store::OutboxRow;

/// The id is drawn by the table's default when the row is written, in the transaction
/// that writes it: a message is one row, so every delivery of it carries the same id.
const ENQUEUE: &str = concat!(
    "INSERT INTO idem_outbox (topic, payload, enqueued_at, available_at)
VALUES ($1, $2, ",
    now!(),
    ", ",
    now!(),
    ")
RETURNING id"
);

/// Takes due messages and hides them from other relays until `$2` from now; the hold (not
/// a transaction kept open during delivery) covers a relay that dies mid-delivery.
const TAKE: &str = concat!(
    "UPDATE idem_outbox
   SET available_at = ",
    now!(),
    " + $2, attempts = attempts + 1
 WHERE seq IN (
       SELECT seq FROM idem_outbox
        WHERE delivered_at IS NULL AND available_at <= ",
    now!(),
    "
        ORDER BY available_at, seq
        LIMIT $1)
RETURNING id, topic, payload, attempts, seq"
);

const MARK_DELIVERED: &str = concat!(
    "UPDATE idem_outbox SET delivered_at = ",
    now!(),
    ", last_error = NULL
 WHERE id = $1 AND delivered_at IS NULL"
);

const MARK_FAILED: &str = concat!(
    "UPDATE idem_outbox SET available_at = ",
    now!(),
    " + $2, last_error = $3
 WHERE id = $1 AND delivered_at IS NULL"
);

/// Gives back messages taken but not handed to the application (the relay was stopped),
/// without counting an attempt. The ids come as one JSON array: SQLite has no arrays.
const RELEASE: &str = concat!(
    "UPDATE idem_outbox SET available_at = ",
    now!(),
    ", attempts = attempts - 1
 WHERE id IN (SELECT value FROM json_each($1)) AND delivered_at IS NULL"
);

/// In batches, so a large backlog never holds the write lock for long.
const PURGE_DELIVERED: &str = concat!(
    "DELETE FROM idem_outbox
 WHERE seq IN (SELECT seq FROM idem_outbox
                WHERE delivered_at < ",
    now!(),
    " - $1
                LIMIT $2)"
);

pub(super) async fn enqueue(
    conn: &mut SqliteConnection,
    topic: &str,
    payload: &str,
) -> sqlx::Result<String> {
    sqlx::query_scalar(ENQUEUE)
        .bind(topic)
        .bind(payload)
        .fetch_one(conn)
        .await
}

pub(super) async fn take(
    conn: &mut SqliteConnection,
    limit: u32,
    hold: Duration,
) -> sqlx::Result<Vec<OutboxRow>> {
    let rows: Vec<(String, String, String, i32, i64)> = sqlx::query_as(TAKE)
        .bind(i64::from(limit))
        .bind(micros(hold))
        .fetch_all(conn)
        .await?;
    let mut messages: Vec<OutboxRow> = rows
        .into_iter()
        .map(|(id, topic, payload, attempt, seq)| OutboxRow {
            id,
            topic,
            payload,
            attempt,
            seq,
        })
        .collect();
    // RETURNING has no order; deliver in the order the messages were written.
    messages.sort_by_key(|message| message.seq);
    Ok(messages)
}

pub(super) async fn mark_delivered(conn: &mut SqliteConnection, id: &str) -> sqlx::Result<()> {
    sqlx::query(MARK_DELIVERED).bind(id).execute(conn).await?;
    Ok(())
}

pub(super) async fn mark_failed(
    conn: &mut SqliteConnection,
    id: &str,
    retry_in: Duration,
    error: &str,
) -> sqlx::Result<()> {
    sqlx::query(MARK_FAILED)
        .bind(id)
        .bind(micros(retry_in))
        .bind(error)
        .execute(conn)
        .await?;
    Ok(())
}

pub(super) async fn release(conn: &mut SqliteConnection, ids: &[String]) -> sqlx::Result<()> {
    let ids = serde_json::to_string(ids).map_err(|error| sqlx::Error::Encode(Box::new(error)))?;
    sqlx::query(RELEASE).bind(ids).execute(conn).await?;
    Ok(())
}

pub(super) async fn purge_delivered(
    conn: &mut SqliteConnection,
    age: Duration,
    limit: u32,
) -> sqlx::Result<u64> {
    let done = sqlx::query(PURGE_DELIVERED)
        .bind(micros(age))
        .bind(i64::from(limit))
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}
