//! The SQLite key store: all of idem's SQL for SQLite lives in this module, one file per
//! concern (the single-transaction claim here, the others beside it).
//!
//! SQLite lets one writer at a time into a database, so a request first reads its key
//! with a plain read ([`Backend::peek`]) on the connection it then opens its transaction
//! on, if it must (one pool acquisition per request), which WAL mode lets through while
//! another request writes: a replay, a 422 or the 409 of a phased attempt holding its
//! lease is answered from that read, without waiting for any writer. Only a key that is
//! absent, or must be reclaimed or taken over, goes on to `BEGIN IMMEDIATE`, which takes
//! the write lock at once, with the busy timeout set to `Idem::claim_wait` for that one
//! statement. A request that cannot get the lock in time fails with `SQLITE_BUSY`: the
//! lock may be held by any request, for any key, so the flow answers 503 `storage-busy`,
//! unless it knows that a request of this process holds this very key (then 409) or a
//! second read finds the key committed while it waited (then what that read answers). Holding
//! the lock, a claim sees every committed row and no other writer can come between its
//! statements, so the claim needs none of PostgreSQL's snapshot re-reads; it also checks
//! again what the read saw, which may have changed in between.
//!
//! Times are INTEGER microseconds since the Unix epoch, read from SQLite's clock
//! ([`now!`]), which on one machine is the application's clock too.

mod inbox;
mod maintenance;
mod outbox;
mod phased;

use std::sync::Arc;
use std::time::Duration;

use futures_util::TryStreamExt;
use sqlx::pool::PoolConnection;
use sqlx::query::QueryAs;
use sqlx::sqlite::{SqliteArguments, SqliteConnection};
use sqlx::{AssertSqlSafe, SqlSafeStr, Sqlite, Transaction};

use super::{
    Backend, Claim, ClaimFailed, ClaimRequest, Completion, KeyColumns, PeekedKey, StoredResponse,
};

/// The current time in microseconds since the Unix epoch, as an SQL expression. SQLite
/// evaluates it once per statement, so every use in one statement agrees.
macro_rules! now {
    () => {
        "CAST(unixepoch('subsec') * 1000000 AS INTEGER)"
    };
}
pub(crate) use now;

/// Draws a fresh value of `idem_attempts` and inserts the key with it as its generation;
/// then returns that generation if the insert won, no row when a row holds the key
/// already. Three statements sent together (sqlx prepares each once per connection), so
/// the claim is one trip to the connection's thread, not two; `changes()` rather than a
/// RETURNING clause, which SQLite runs through a temporary table. Every new row gets its
/// own generation, so that no two lives of a key share one and the stored response of one
/// life, sealed to it, does not open in another. The value is drawn before the insert
/// knows whether it wins: one left unused is a gap in a counter that only has to grow.
const CLAIM: &str = concat!(
    "UPDATE idem_attempts SET value = value + 1;
INSERT INTO idem_keys (scope, idem_key, request_hash, method, path, created_at, expires_at,
                       generation)
VALUES ($1, $2, $3, $4, $5, ",
    now!(),
    ", ",
    now!(),
    " + $6, (SELECT value FROM idem_attempts))
ON CONFLICT (scope, idem_key) DO NOTHING;
SELECT value FROM idem_attempts WHERE changes() = 1"
);

/// The row that holds a key, with whether it may be reclaimed (completed, and its
/// retention ended) and whether its lease (of the phased form) is free.
const SELECT_EXISTING: &str = concat!(
    "SELECT expires_at <= ",
    now!(),
    " AND state = 'completed' AS expired,
       coalesce(locked_until <= ",
    now!(),
    ", 1) AS lease_free,
       request_hash, method, path, state, response_status, response_headers, response_body,
       generation
  FROM idem_keys
 WHERE scope = $1 AND idem_key = $2"
);

/// Starts a new generation on a completed key whose retention ended but which the expiry
/// sweep has not deleted yet. `$7` is a fresh value of `idem_attempts`; `$8` the lease
/// end, NULL for the single-transaction form. A `started` key is never reclaimed: a
/// phased key without a final answer may have moved money, and its retry takes the
/// attempt over instead, keeping its generation and so its derived keys.
const RECLAIM_EXPIRED: &str = concat!(
    "UPDATE idem_keys
   SET request_hash = $3, method = $4, path = $5, state = 'started',
       recovery_point = 'started', locked_until = ",
    now!(),
    " + $8, response_status = NULL,
       response_headers = NULL, response_body = NULL, created_at = ",
    now!(),
    ",
       expires_at = ",
    now!(),
    " + $6, generation = $7, fencing_token = $7
 WHERE scope = $1 AND idem_key = $2 AND state = 'completed' AND expires_at <= ",
    now!(),
    "
RETURNING generation, fencing_token"
);

/// The old generation's phases belong to another request.
const DELETE_PHASES: &str = "DELETE FROM idem_phases WHERE scope = $1 AND idem_key = $2";

/// Draws the next fencing token (or generation). Writers are serialized, so this row is
/// never contended.
const NEXT_ATTEMPT: &str = "UPDATE idem_attempts SET value = value + 1 RETURNING value";

/// Matches no row when the key row is gone (`rows_affected`, not a RETURNING clause and
/// its temporary table).
const COMPLETE: &str = "\
UPDATE idem_keys
   SET state = 'completed', response_status = $3, response_headers = $4,
       response_body = $5, locked_until = NULL
 WHERE scope = $1 AND idem_key = $2";

/// What [`SELECT_EXISTING`] returns.
#[derive(sqlx::FromRow)]
struct KeyRow {
    /// Completed and past its retention: a new request may reclaim it.
    expired: bool,
    /// No phased attempt holds its lease.
    lease_free: bool,
    #[sqlx(flatten)]
    key: KeyColumns,
}

/// `SQLITE_BUSY`, in the low byte of every extended code (`SQLITE_BUSY_SNAPSHOT`, ...):
/// another connection holds the lock this statement needs.
const SQLITE_BUSY: i32 = 5;

/// A duration as the INTEGER microseconds the tables store.
fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// Closes the connection if the begin is abandoned half-way (the request's future was
/// dropped): it may hold an open transaction that sqlx does not know of, or a changed
/// busy timeout, and must not go back to the pool.
struct Beginning(Option<PoolConnection<Sqlite>>);

impl Beginning {
    fn conn(&mut self) -> &mut SqliteConnection {
        self.0
            .as_mut()
            .expect("the connection is taken only at the end")
    }

    fn finish(mut self) -> PoolConnection<Sqlite> {
        self.0
            .take()
            .expect("the connection is taken only at the end")
    }
}

impl Drop for Beginning {
    fn drop(&mut self) {
        if let Some(conn) = self.0.as_mut() {
            conn.close_on_drop();
        }
    }
}

impl Backend for Sqlite {
    /// The statements that read the connection's busy timeout, set it to the claim's
    /// wait and take the write lock; [`begin`](Self::begin) restores the connection's own
    /// timeout afterwards. Second, the same followed by [`CLAIM`], for
    /// [`begin_claim`](Self::begin_claim). Prepared once per connection (sqlx caches them
    /// by their text).
    type Opening = (Arc<str>, Arc<str>);

    fn opening(claim_wait: Duration) -> (Arc<str>, Arc<str>) {
        let begin = format!(
            "PRAGMA busy_timeout; PRAGMA busy_timeout = {}; BEGIN IMMEDIATE",
            claim_wait.as_millis()
        );
        let claim = format!("{begin};\n{CLAIM}");
        (begin.into(), claim.into())
    }

    async fn begin(
        conn: PoolConnection<Sqlite>,
        (opening, _): &(Arc<str>, Arc<str>),
    ) -> Result<Transaction<'static, Self>, sqlx::Error> {
        let mut begun = Beginning(Some(conn));
        // The application's busy timeout (the first row; setting it answers the new one),
        // restored once the write lock is ours (or was not to be had): its own statements
        // keep waiting as long as it configured. Read in the same trip to the
        // connection's thread as the `BEGIN IMMEDIATE`, not in one of its own.
        let mut outer = None;
        let began = {
            let mut rows = sqlx::query_scalar::<_, i64>(AssertSqlSafe(Arc::clone(opening)))
                .fetch(begun.conn());
            loop {
                match rows.try_next().await {
                    Ok(Some(timeout)) => {
                        outer.get_or_insert(timeout);
                    }
                    Ok(None) => break Ok(()),
                    Err(error) => break Err(error),
                }
            }
        };
        let restore = outer.map(|outer| format!("PRAGMA busy_timeout = {outer}"));
        match (began, restore) {
            (Ok(()), Some(restore)) => {
                // sqlx does not know of the transaction `BEGIN IMMEDIATE` opened; handing
                // it another statement to "begin" with (the restore) makes it adopt the
                // open transaction, so commit, rollback and rollback-on-drop work as usual.
                Transaction::begin(begun.finish(), Some(AssertSqlSafe(restore).into_sql_str()))
                    .await
            }
            (Err(error), Some(restore)) => {
                sqlx::raw_sql(AssertSqlSafe(restore))
                    .execute(begun.conn())
                    .await?;
                drop(begun.finish());
                Err(error)
            }
            // The read failed: nothing was changed, and the guard closes the connection.
            (Err(error), None) => Err(error),
            (Ok(()), None) => Err(sqlx::Error::Protocol(
                "PRAGMA busy_timeout answered no row".into(),
            )),
        }
    }

    const CLAIMS_WITH_BEGIN: bool = true;

    /// One trip to the connection's thread for the lock and the insert, where
    /// [`begin`](Self::begin) and [`claim`](Self::claim) take two: the claim's statements
    /// follow the `BEGIN IMMEDIATE` in one batch, before sqlx adopts the transaction (with
    /// the restore of the busy timeout, as `begin` does). Holding the write lock, the
    /// claim's statements wait for nothing, so the claim's wait still in force for them
    /// changes nothing.
    async fn begin_claim(
        conn: PoolConnection<Sqlite>,
        (_, opening): &(Arc<str>, Arc<str>),
        req: &ClaimRequest<'_>,
    ) -> Result<(Transaction<'static, Self>, Claim), ClaimFailed> {
        let mut begun = Beginning(Some(conn));
        // The rows: the application's busy timeout, the claim's wait (setting it answers
        // the new value), then the generation if the insert won.
        let (mut outer, mut generation) = (None, None);
        let ran = {
            let mut rows = bind_claim(
                sqlx::query_as::<_, (i64,)>(AssertSqlSafe(Arc::clone(opening))),
                req,
            )
            .fetch(begun.conn());
            let mut index = 0;
            loop {
                match rows.try_next().await {
                    Ok(Some((value,))) => {
                        match index {
                            0 => outer = Some(value),
                            2 => generation = Some(value),
                            _ => {}
                        }
                        index += 1;
                    }
                    Ok(None) => break Ok(()),
                    Err(error) => break Err(error),
                }
            }
        };
        let Some(outer) = outer else {
            // The read failed: nothing was changed, and the guard closes the connection.
            return Err(ClaimFailed::Begin(ran.err().unwrap_or_else(|| {
                sqlx::Error::Protocol("PRAGMA busy_timeout answered no row".into())
            })));
        };
        if let Err(error) = ran {
            // The batch stopped at the failed statement: at `BEGIN IMMEDIATE` (no write
            // lock within the claim's wait, and no transaction open), or in the claim
            // (the transaction open, unknown to sqlx). Either way the connection gets its
            // timeout back and ends what the batch began; the ROLLBACK tells which it was.
            let cleanup = format!("PRAGMA busy_timeout = {outer}; ROLLBACK");
            let failed = match sqlx::raw_sql(AssertSqlSafe(cleanup))
                .execute(begun.conn())
                .await
            {
                Ok(_) => ClaimFailed::Claim(error),
                Err(none) if Self::is_no_transaction(&none) => ClaimFailed::Begin(error),
                // The connection's state is unknown: the guard closes it.
                Err(_) => return Err(ClaimFailed::Begin(error)),
            };
            drop(begun.finish());
            return Err(failed);
        }
        let restore = format!("PRAGMA busy_timeout = {outer}");
        // As in `begin`: the restore makes sqlx adopt the open transaction.
        let mut txn =
            Transaction::begin(begun.finish(), Some(AssertSqlSafe(restore).into_sql_str()))
                .await
                .map_err(ClaimFailed::Begin)?;
        let claim = match generation {
            Some(generation) => Claim::Claimed { generation },
            None => held_key(&mut txn, req).await.map_err(ClaimFailed::Claim)?,
        };
        Ok((txn, claim))
    }

    async fn claim(
        conn: &mut SqliteConnection,
        req: &ClaimRequest<'_>,
    ) -> Result<Claim, sqlx::Error> {
        let inserted: Option<(i64,)> = bind_claim(sqlx::query_as(CLAIM), req)
            .fetch_optional(&mut *conn)
            .await?;
        if let Some((generation,)) = inserted {
            return Ok(Claim::Claimed { generation });
        }
        held_key(conn, req).await
    }

    async fn complete(
        conn: &mut SqliteConnection,
        req: &ClaimRequest<'_>,
        response: &StoredResponse<'_>,
    ) -> Result<Completion, sqlx::Error> {
        let status = i16::try_from(response.status).expect("HTTP status codes fit in i16");
        let completed = sqlx::query(COMPLETE)
            .bind(req.scope)
            .bind(req.key)
            .bind(status)
            .bind(response.headers)
            .bind(response.body)
            .execute(conn)
            .await?;
        // SQLite cannot tell, in SQL, whether the handler committed idem's transaction
        // itself; if it did, this statement ran on its own and idem's COMMIT then finds no
        // transaction (`is_no_transaction`).
        Ok(if completed.rows_affected() == 1 {
            Completion::Recorded
        } else {
            Completion::RowGone
        })
    }

    fn is_no_transaction(error: &sqlx::Error) -> bool {
        // SQLITE_ERROR with the message `COMMIT` answers outside a transaction; SQLite has
        // no code of its own for it, and its message has been the same for two decades.
        error.as_database_error().is_some_and(|e| {
            e.code().as_deref() == Some("1") && e.message().contains("no transaction is active")
        })
    }

    fn is_lock_timeout(error: &sqlx::Error) -> bool {
        error
            .as_database_error()
            .and_then(|e| e.code())
            .and_then(|code| code.parse::<i32>().ok())
            .is_some_and(|code| code & 0xff == SQLITE_BUSY)
    }

    /// SQLite has no aborted state: after a failed statement the transaction goes on, and
    /// what the handler wrote before it stays.
    fn is_aborted_transaction(_: &sqlx::Error) -> bool {
        false
    }

    const ONE_WRITER: bool = true;

    /// A plain read in autocommit mode: in WAL mode it proceeds while another connection
    /// holds the write lock, so a replay never queues behind a request for another key.
    /// sqlx resets the statement once it has the row (or none), which ends the read's
    /// snapshot before the answer comes back: the `BEGIN IMMEDIATE` that may follow on
    /// this connection starts from the newest commit, not from this read's.
    async fn peek(
        conn: &mut SqliteConnection,
        req: &ClaimRequest<'_>,
    ) -> Result<Option<PeekedKey>, sqlx::Error> {
        Self::read_key(conn, req).await
    }

    async fn read_key(
        conn: &mut SqliteConnection,
        req: &ClaimRequest<'_>,
    ) -> Result<Option<PeekedKey>, sqlx::Error> {
        let row: Option<KeyRow> = sqlx::query_as(SELECT_EXISTING)
            .bind(req.scope)
            .bind(req.key)
            .fetch_optional(conn)
            .await?;
        Ok(row.map(|row| PeekedKey {
            expired: row.expired,
            lease_free: row.lease_free,
            key: row.key.into_existing(),
        }))
    }

    /// Besides a refused constraint, `SQLITE_BUSY`: the COMMIT did not happen and the
    /// transaction stayed open, and sqlx rolls it back when it is dropped.
    fn is_definite_rollback(error: &sqlx::Error) -> bool {
        Self::is_lock_timeout(error)
            || error
                .as_database_error()
                .is_some_and(|e| !matches!(e.kind(), sqlx::error::ErrorKind::Other))
    }
}

/// The claim after its insert found the key taken: the row that holds it, or the key
/// reclaimed as a new generation when that row's retention ended.
async fn held_key(conn: &mut SqliteConnection, req: &ClaimRequest<'_>) -> sqlx::Result<Claim> {
    let row: Option<KeyRow> = sqlx::query_as(SELECT_EXISTING)
        .bind(req.scope)
        .bind(req.key)
        .fetch_optional(&mut *conn)
        .await?;
    match row {
        Some(row) if row.expired && row.lease_free => {
            match reclaim_expired(conn, req, None).await? {
                Some((generation, _)) => Ok(Claim::Claimed { generation }),
                // The write lock is held, so the expired row read above is still there.
                None => Ok(Claim::Vanished),
            }
        }
        Some(row) => Ok(Claim::Existing(row.key.into_existing())),
        // The write lock is held: the row that made the insert conflict is still there.
        None => Ok(Claim::Vanished),
    }
}

/// Draws the next value of `idem_attempts`.
async fn next_attempt(conn: &mut SqliteConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar(NEXT_ATTEMPT).fetch_one(conn).await
}

/// Reclaims an expired key as a new generation; `lease` for the phased form. Returns
/// `(generation, fencing_token)` when it did.
async fn reclaim_expired(
    conn: &mut SqliteConnection,
    req: &ClaimRequest<'_>,
    lease: Option<Duration>,
) -> sqlx::Result<Option<(i64, i64)>> {
    let token = next_attempt(&mut *conn).await?;
    let reclaimed: Option<(i64, i64)> = bind_claim(sqlx::query_as(RECLAIM_EXPIRED), req)
        .bind(token)
        .bind(lease.map(micros))
        .fetch_optional(&mut *conn)
        .await?;
    if reclaimed.is_some() {
        sqlx::query(DELETE_PHASES)
            .bind(req.scope)
            .bind(req.key)
            .execute(&mut *conn)
            .await?;
    }
    Ok(reclaimed)
}

/// Binds $1..$6, shared by the claims and the reclaims of both forms.
fn bind_claim<'q, O>(
    query: QueryAs<'q, Sqlite, O, SqliteArguments>,
    req: &'q ClaimRequest<'_>,
) -> QueryAs<'q, Sqlite, O, SqliteArguments> {
    query
        .bind(req.scope)
        .bind(req.key)
        .bind(req.fingerprint.as_slice())
        .bind(req.method)
        .bind(req.path)
        .bind(micros(req.retention))
}
