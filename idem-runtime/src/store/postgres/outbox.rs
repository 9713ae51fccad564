//! The outbox's SQL: messages written in the caller's transaction, and the relay's
//! take / claim / renew / mark / release / purge; every write after the take is fenced by
//! the take's holder token.

use super::own_transaction;
use crate::store::OutboxStore;
use sqlx::Postgres;
use std::time::Duration;

use sqlx::postgres::PgConnection;

use crate::store::OutboxRow;

/// The id is drawn by the database when the row is written, in the transaction that
/// writes it: a message is one row, so every delivery of it carries the same id.
const ENQUEUE: &str = "\
INSERT INTO idem_outbox (topic, payload) VALUES ($1, $2::json) RETURNING id::text";

/// Takes due messages for the take `$3` and hides them from other relays until `$2` from
/// now. `SKIP LOCKED` lets several relays share the table without taking the same message;
/// the hold (not a transaction kept open during delivery) covers a relay that dies: the
/// message is simply due again when the hold ends. No attempt is counted here: a message
/// taken is not yet delivered, and the relay may lose it before it gets to it.
const TAKE: &str = "\
UPDATE idem_outbox
   SET available_at = clock_timestamp() + $2, holder = $3
 WHERE id IN (
       SELECT id FROM idem_outbox
        WHERE delivered_at IS NULL AND available_at <= clock_timestamp()
        ORDER BY available_at, seq
        LIMIT $1
          FOR UPDATE SKIP LOCKED)
RETURNING id::text AS id, topic, payload::text AS payload, seq";

/// Starts one delivery, if the take `$2` still holds the message: hides it for `$3` from
/// now and counts the attempt. Matches nothing once another relay took the message after
/// this take's hold ran out; a take waiting on that relay's row lock re-reads `holder`
/// once the lock is free, so of two relays only one ever starts the delivery.
const CLAIM: &str = "\
UPDATE idem_outbox
   SET available_at = clock_timestamp() + $3, attempts = attempts + 1
 WHERE id = $1::uuid AND holder = $2 AND delivered_at IS NULL
RETURNING attempts";

/// The heartbeat of a running delivery.
const RENEW: &str = "\
UPDATE idem_outbox SET available_at = clock_timestamp() + $3
 WHERE id = $1::uuid AND holder = $2 AND delivered_at IS NULL";

const MARK_DELIVERED: &str = "\
UPDATE idem_outbox SET delivered_at = clock_timestamp(), last_error = NULL
 WHERE id = $1::uuid AND holder = $2 AND delivered_at IS NULL";

const MARK_FAILED: &str = "\
UPDATE idem_outbox SET available_at = clock_timestamp() + $3, last_error = $4
 WHERE id = $1::uuid AND holder = $2 AND delivered_at IS NULL";

/// Gives back messages taken but not handed to the application (the relay was stopped).
/// They were never claimed, so no attempt was counted for them.
const RELEASE: &str = "\
UPDATE idem_outbox SET available_at = clock_timestamp(), holder = NULL
 WHERE id = ANY($1::text[]::uuid[]) AND holder = $2 AND delivered_at IS NULL";

/// In batches, so a large backlog never holds locks for long.
const PURGE_DELIVERED: &str = "\
DELETE FROM idem_outbox
 WHERE id IN (SELECT id FROM idem_outbox
               WHERE delivered_at < clock_timestamp() - $1
               LIMIT $2)";

impl OutboxStore for Postgres {
    async fn enqueue(conn: &mut PgConnection, topic: &str, payload: &str) -> sqlx::Result<String> {
        sqlx::query_scalar(ENQUEUE)
            .bind(topic)
            .bind(payload)
            .fetch_one(conn)
            .await
    }

    async fn take_messages(
        conn: &mut PgConnection,
        limit: u32,
        hold: Duration,
        holder: i64,
    ) -> sqlx::Result<Vec<OutboxRow>> {
        own_transaction!(conn, {
            let mut messages: Vec<OutboxRow> = sqlx::query_as(TAKE)
                .bind(i64::from(limit))
                .bind(hold)
                .bind(holder)
                .fetch_all(conn)
                .await?;
            // RETURNING has no order; deliver in the order the messages were written.
            messages.sort_by_key(|message| message.seq);
            Ok(messages)
        })
    }

    async fn claim_message(
        conn: &mut PgConnection,
        id: &str,
        holder: i64,
        hold: Duration,
    ) -> sqlx::Result<Option<i32>> {
        own_transaction!(conn, {
            sqlx::query_scalar(CLAIM)
                .bind(id)
                .bind(holder)
                .bind(hold)
                .fetch_optional(conn)
                .await
        })
    }

    async fn renew_message(
        conn: &mut PgConnection,
        id: &str,
        holder: i64,
        hold: Duration,
    ) -> sqlx::Result<bool> {
        own_transaction!(conn, {
            let done = sqlx::query(RENEW)
                .bind(id)
                .bind(holder)
                .bind(hold)
                .execute(conn)
                .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    async fn mark_delivered(conn: &mut PgConnection, id: &str, holder: i64) -> sqlx::Result<bool> {
        own_transaction!(conn, {
            let done = sqlx::query(MARK_DELIVERED)
                .bind(id)
                .bind(holder)
                .execute(conn)
                .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    async fn mark_failed(
        conn: &mut PgConnection,
        id: &str,
        holder: i64,
        retry_in: Duration,
        error: &str,
    ) -> sqlx::Result<bool> {
        own_transaction!(conn, {
            let done = sqlx::query(MARK_FAILED)
                .bind(id)
                .bind(holder)
                .bind(retry_in)
                .bind(error)
                .execute(conn)
                .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    async fn release_messages(
        conn: &mut PgConnection,
        ids: &[String],
        holder: i64,
    ) -> sqlx::Result<u64> {
        own_transaction!(conn, {
            let done = sqlx::query(RELEASE)
                .bind(ids)
                .bind(holder)
                .execute(conn)
                .await?;
            Ok(done.rows_affected())
        })
    }

    async fn purge_delivered(
        conn: &mut PgConnection,
        age: Duration,
        limit: u32,
    ) -> sqlx::Result<u64> {
        own_transaction!(conn, {
            let done = sqlx::query(PURGE_DELIVERED)
                .bind(age)
                .bind(i64::from(limit))
                .execute(conn)
                .await?;
            Ok(done.rows_affected())
        })
    }
}
