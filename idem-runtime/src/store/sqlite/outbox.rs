//! The outbox's SQL on SQLite: messages written in the caller's transaction, and the
//! relay's take / claim / renew / mark / release / purge; every write after the take is fenced
//! by the take's holder token.
//!
//! Each relay statement is one write in a transaction of its own, and SQLite runs one
//! writer at a time: two relays never take the same message, with no row locks needed.

use crate::store::OutboxStore;
use sqlx::Sqlite;
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

/// Takes due messages for the take `$3` and hides them from other relays until `$2` from
/// now; the hold (not a transaction kept open during delivery) covers a relay that dies.
/// No attempt is counted here: a message taken is not yet delivered, and the relay may
/// lose it before it gets to it.
const TAKE: &str = concat!(
    "UPDATE idem_outbox
   SET available_at = ",
    now!(),
    " + $2, holder = $3
 WHERE seq IN (
       SELECT seq FROM idem_outbox
        WHERE delivered_at IS NULL AND available_at <= ",
    now!(),
    "
        ORDER BY available_at, seq
        LIMIT $1)
RETURNING id, topic, payload, seq"
);

/// Starts one delivery, if the take `$2` still holds the message: hides it for `$3` from
/// now and counts the attempt. Matches nothing once another relay took the message after
/// this take's hold ran out (one writer at a time: the two never interleave).
const CLAIM: &str = concat!(
    "UPDATE idem_outbox
   SET available_at = ",
    now!(),
    " + $3, attempts = attempts + 1
 WHERE id = $1 AND holder = $2 AND delivered_at IS NULL
RETURNING attempts"
);

/// The heartbeat of a running delivery.
const RENEW: &str = concat!(
    "UPDATE idem_outbox SET available_at = ",
    now!(),
    " + $3
 WHERE id = $1 AND holder = $2 AND delivered_at IS NULL"
);

const MARK_DELIVERED: &str = concat!(
    "UPDATE idem_outbox SET delivered_at = ",
    now!(),
    ", last_error = NULL
 WHERE id = $1 AND holder = $2 AND delivered_at IS NULL"
);

const MARK_FAILED: &str = concat!(
    "UPDATE idem_outbox SET available_at = ",
    now!(),
    " + $3, last_error = $4
 WHERE id = $1 AND holder = $2 AND delivered_at IS NULL"
);

/// Gives back messages taken but not handed to the application (the relay was stopped).
/// They were never claimed, so no attempt was counted for them. The ids come as one JSON
/// array: SQLite has no arrays.
const RELEASE: &str = concat!(
    "UPDATE idem_outbox SET available_at = ",
    now!(),
    ", holder = NULL
 WHERE id IN (SELECT value FROM json_each($1)) AND holder = $2 AND delivered_at IS NULL"
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

impl OutboxStore for Sqlite {
    async fn enqueue(
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

    async fn take_messages(
        conn: &mut SqliteConnection,
        limit: u32,
        hold: Duration,
        holder: i64,
    ) -> sqlx::Result<Vec<OutboxRow>> {
        let mut messages: Vec<OutboxRow> = sqlx::query_as(TAKE)
            .bind(i64::from(limit))
            .bind(micros(hold))
            .bind(holder)
            .fetch_all(conn)
            .await?;
        // RETURNING has no order; deliver in the order the messages were written.
        messages.sort_by_key(|message| message.seq);
        Ok(messages)
    }

    async fn claim_message(
        conn: &mut SqliteConnection,
        id: &str,
        holder: i64,
        hold: Duration,
    ) -> sqlx::Result<Option<i32>> {
        sqlx::query_scalar(CLAIM)
            .bind(id)
            .bind(holder)
            .bind(micros(hold))
            .fetch_optional(conn)
            .await
    }

    async fn renew_message(
        conn: &mut SqliteConnection,
        id: &str,
        holder: i64,
        hold: Duration,
    ) -> sqlx::Result<bool> {
        let done = sqlx::query(RENEW)
            .bind(id)
            .bind(holder)
            .bind(micros(hold))
            .execute(conn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn mark_delivered(
        conn: &mut SqliteConnection,
        id: &str,
        holder: i64,
    ) -> sqlx::Result<bool> {
        let done = sqlx::query(MARK_DELIVERED)
            .bind(id)
            .bind(holder)
            .execute(conn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn mark_failed(
        conn: &mut SqliteConnection,
        id: &str,
        holder: i64,
        retry_in: Duration,
        error: &str,
    ) -> sqlx::Result<bool> {
        let done = sqlx::query(MARK_FAILED)
            .bind(id)
            .bind(holder)
            .bind(micros(retry_in))
            .bind(error)
            .execute(conn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn release_messages(
        conn: &mut SqliteConnection,
        ids: &[String],
        holder: i64,
    ) -> sqlx::Result<u64> {
        let ids =
            serde_json::to_string(ids).map_err(|error| sqlx::Error::Encode(Box::new(error)))?;
        let done = sqlx::query(RELEASE)
            .bind(ids)
            .bind(holder)
            .execute(conn)
            .await?;
        Ok(done.rows_affected())
    }

    async fn purge_delivered(
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
}
