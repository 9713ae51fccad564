//! The outbox's SQL: messages written in the caller's transaction, and the relay's
//! take / mark / release / purge.

use std::time::Duration;

use sqlx::postgres::PgConnection;

use crate::store::OutboxRow;

/// The id is drawn by the database when the row is written, in the transaction that
/// writes it: a message is one row, so every delivery of it carries the same id.
const ENQUEUE: &str = "\
INSERT INTO idem_outbox (topic, payload) VALUES ($1, $2::json) RETURNING id::text";

/// Takes due messages and hides them from other relays until `$2` from now. `SKIP LOCKED`
/// lets several relays share the table without taking the same message; the hold (not a
/// transaction kept open during delivery) covers a relay that dies mid-delivery: the
/// message is simply due again when the hold ends.
const TAKE: &str = "\
UPDATE idem_outbox
   SET available_at = clock_timestamp() + $2, attempts = attempts + 1
 WHERE id IN (
       SELECT id FROM idem_outbox
        WHERE delivered_at IS NULL AND available_at <= clock_timestamp()
        ORDER BY available_at, seq
        LIMIT $1
          FOR UPDATE SKIP LOCKED)
RETURNING id::text, topic, payload::text, attempts, seq";

const MARK_DELIVERED: &str = "\
UPDATE idem_outbox SET delivered_at = clock_timestamp(), last_error = NULL
 WHERE id = $1::uuid AND delivered_at IS NULL";

const MARK_FAILED: &str = "\
UPDATE idem_outbox SET available_at = clock_timestamp() + $2, last_error = $3
 WHERE id = $1::uuid AND delivered_at IS NULL";

/// Gives back messages taken but not handed to the application (the relay was stopped),
/// without counting an attempt.
const RELEASE: &str = "\
UPDATE idem_outbox SET available_at = clock_timestamp(), attempts = attempts - 1
 WHERE id = ANY($1::text[]::uuid[]) AND delivered_at IS NULL";

/// In batches, so a large backlog never holds locks for long.
const PURGE_DELIVERED: &str = "\
DELETE FROM idem_outbox
 WHERE id IN (SELECT id FROM idem_outbox
               WHERE delivered_at < clock_timestamp() - $1
               LIMIT $2)";

pub(super) async fn enqueue(
    conn: &mut PgConnection,
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
    conn: &mut PgConnection,
    limit: u32,
    hold: Duration,
) -> sqlx::Result<Vec<OutboxRow>> {
    let rows: Vec<(String, String, String, i32, i64)> = sqlx::query_as(TAKE)
        .bind(i64::from(limit))
        .bind(hold)
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

pub(super) async fn mark_delivered(conn: &mut PgConnection, id: &str) -> sqlx::Result<()> {
    sqlx::query(MARK_DELIVERED).bind(id).execute(conn).await?;
    Ok(())
}

pub(super) async fn mark_failed(
    conn: &mut PgConnection,
    id: &str,
    retry_in: Duration,
    error: &str,
) -> sqlx::Result<()> {
    sqlx::query(MARK_FAILED)
        .bind(id)
        .bind(retry_in)
        .bind(error)
        .execute(conn)
        .await?;
    Ok(())
}

pub(super) async fn release(conn: &mut PgConnection, ids: &[String]) -> sqlx::Result<()> {
    sqlx::query(RELEASE).bind(ids).execute(conn).await?;
    Ok(())
}

pub(super) async fn purge_delivered(
    conn: &mut PgConnection,
    age: Duration,
    limit: u32,
) -> sqlx::Result<u64> {
    let done = sqlx::query(PURGE_DELIVERED)
        .bind(age)
        .bind(i64::from(limit))
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}
