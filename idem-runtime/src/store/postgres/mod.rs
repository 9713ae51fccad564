//! The PostgreSQL key store: all of idem's SQL for PostgreSQL lives in this module, one
//! file per concern (the single-transaction claim here, the others beside it).

mod inbox;
mod maintenance;
mod outbox;
mod phased;
mod record;
mod shielded;
mod staged;

use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgConnection, PgRow};
use sqlx::query::QueryAs;
use sqlx::{Postgres, Row as _, SqlSafeStr as _, Transaction};

use super::{
    Backend, Claim, ClaimRequest, Completion, KeyColumns, OwnedResponse, PeekedKey, StoredResponse,
};
pub use record::ExistingRecord;

/// Saves the application's `lock_timeout` in a transaction-local setting, then shortens
/// it to the claim's wait. Both happen inside the prepared claim, before its insert can
/// wait for another request's row, rather than in a statement of their own after
/// `BEGIN`: that one was parsed and planned on every request. The saved value doubles
/// as a marker that idem's transaction is still open: it disappears if the handler
/// commits. The target list is evaluated left to right, so the save reads the
/// application's value before the second call replaces it.
macro_rules! claim_lock_timeout {
    ($param:literal) => {
        concat!(
            "SELECT set_config('idem.outer_lock_timeout', current_setting('lock_timeout'), true), ",
            "set_config('lock_timeout', (",
            $param,
            "::bigint)::text, true)"
        )
    };
}
pub(super) use claim_lock_timeout;

/// Runs `$body`, statements on `$conn`, in a transaction of its own (a savepoint when
/// `$conn` is in one already) when the connection may be behind a transaction pooler; on
/// any other connection, as it is. For the statements idem runs outside a request's
/// transaction (the relay, lease renewals and releases, the phased completion): behind a
/// transaction pooler such as PgBouncer 1.18, sqlx's prepared statement (parsed in one
/// round trip, executed in the next) only stays on one server connection inside a
/// transaction. Single statements, so the transaction changes nothing but the two round
/// trips of its `BEGIN` and `COMMIT`; see [`may_be_pooled`] for which connections pay them.
macro_rules! own_transaction {
    ($conn:ident, $body:expr) => {{
        if !$crate::store::postgres::may_be_pooled(&*$conn) {
            let $conn: &mut PgConnection = &mut *$conn;
            $body
        } else {
            let mut tx = sqlx::Connection::begin(&mut *$conn).await?;
            let $conn: &mut PgConnection = &mut tx;
            // `?` on the body's own result: an error returns before COMMIT, and dropping
            // the transaction rolls it back.
            let out: sqlx::Result<_> = $body;
            let out = out?;
            tx.commit().await?;
            Ok(out)
        }
    }};
}
pub(super) use own_transaction;

/// Whether `conn` may reach PostgreSQL through a transaction pooler, so that a statement
/// outside a transaction needs one of its own (`own_transaction!`). Read from the
/// connection at no cost, so no setting can be forgotten: a connection that keeps
/// prepared statements (sqlx's statement cache on, its default) is not behind a pooler
/// that loses them between transactions, where the next use of a cached statement would
/// fail on another server connection; `docs/guide/deployment.md` asks for the cache off there
/// (`statement-cache-capacity=0`). An empty cache counts as pooled: with the cache off,
/// always; with it on, only for the connection's first statement, which then pays the
/// two round trips once. (A pooler that keeps prepared statements itself, PgBouncer 1.21
/// with `max_prepared_statements`, needs no transaction either.)
pub(crate) fn may_be_pooled(conn: &PgConnection) -> bool {
    sqlx::Connection::cached_statements_size(conn) == 0
}

/// The advisory lock key `idem::migrate` holds while it migrates (per database: advisory
/// locks are scoped to the current database). "idem_mig" in ASCII, apart from sqlx's keys,
/// which are derived from the database name, so the application's own `sqlx::migrate!`
/// does not wait for idem's.
pub(super) const MIGRATION_LOCK: i64 = 0x6964_656d_5f6d_6967;

/// Inserts the key, or returns the row that holds it. `DO NOTHING` (rather than
/// `DO UPDATE`) takes no row lock on an existing key, so concurrent replays of one key
/// do not queue behind each other. When the insert wins, its RETURNING clause restores
/// the application's lock timeout in the same statement.
///
/// A row that another transaction committed while this insert waited for it is not in
/// this statement's snapshot; the caller then reads it with `SELECT_EXISTING`.
///
/// Every new row draws its generation, so that no two lives of a key share one: the
/// stored response of one life is sealed to it and does not open in another. It is drawn
/// in `cfg`, beside the lock timeout: a volatile call in the insert's own `SELECT` would
/// keep the planner from flattening that `SELECT` into the insert, leaving a subquery scan
/// set up on every execution. Drawing it there costs no more values: the insert builds its
/// row, and so drew the value, before its conflict check found a key.
///
/// The result has three columns: the generation, the existing row's request and response
/// head as one record (NULL when the insert won), and the body, because PostgreSQL builds
/// each plan node's projection column by column on every execution (the cost is measured
/// in docs/benchmarks-history.md, "A second look"). The body stays a column of its own, so
/// that a replay's body is a share of the row's buffer (`StoredBytes`); a record's fields
/// are decoded from copies.
pub const CLAIM: &str = concat!(
    "WITH cfg AS MATERIALIZED (",
    claim_lock_timeout!("$7"),
    ", nextval('idem_attempts') AS next_generation),
ins AS (
    INSERT INTO idem_keys (scope, idem_key, request_hash, method, path, expires_at, generation)
    SELECT $1, $2, $3, $4, $5, now() + $6, next_generation FROM cfg
    ON CONFLICT (scope, idem_key) DO NOTHING
    RETURNING set_config('lock_timeout', current_setting('idem.outer_lock_timeout'), true),
              generation
)
SELECT generation, NULL::record AS existing, NULL::bytea AS response_body FROM ins
UNION ALL
SELECT k.generation,
       ROW(k.expires_at <= now() AND k.state = 'completed', k.request_hash, k.method, k.path,
           k.state, k.response_status, k.response_headers),
       k.response_body
  FROM idem_keys k
 WHERE k.scope = $1 AND k.idem_key = $2 AND NOT EXISTS (SELECT FROM ins)"
);

/// The row that holds the key, in the claim's shape.
const SELECT_EXISTING: &str = "\
SELECT generation,
       ROW(expires_at <= now() AND state = 'completed', request_hash, method, path, state,
           response_status, response_headers) AS existing,
       response_body
  FROM idem_keys
 WHERE scope = $1 AND idem_key = $2";

/// Takes over a completed key whose retention ended but which the expiry sweep has not
/// deleted yet. The new generation gets a fresh fencing token and the old generation's
/// recorded phases go with it. A key still `started` is never reclaimed, however old: a
/// phased key without a final answer may have moved money, and its retry must resume
/// that operation with the same derived keys (see the phased claim).
const RECLAIM_EXPIRED: &str = "\
WITH t AS (SELECT nextval('idem_attempts') AS v),
k AS (
    UPDATE idem_keys
       SET request_hash = $3, method = $4, path = $5, state = 'started',
           recovery_point = 'started', locked_until = NULL, response_status = NULL,
           response_headers = NULL, response_body = NULL, created_at = now(),
           expires_at = now() + $6, generation = t.v, fencing_token = t.v
      FROM t
     WHERE scope = $1 AND idem_key = $2 AND expires_at <= now() AND state = 'completed'
    RETURNING generation
),
gone AS (
    DELETE FROM idem_phases p USING k WHERE p.scope = $1 AND p.idem_key = $2
)
SELECT set_config('lock_timeout', current_setting('idem.outer_lock_timeout'), true), generation
  FROM k";

/// Records the response while idem's transaction is still open: the transaction-local
/// marker the claim set (the saved lock timeout) is gone once the handler has ended that
/// transaction, and then no row is updated. The caller tells a row that is gone from a
/// transaction that ended with `COMPLETE_CHECKED`, which only a handler that ended the
/// transaction itself ever needs. A first execution so learns everything from the update
/// count, and its completion has no RETURNING clause, whose projection costs a share of
/// every request (`idem-bench/profile-postgres.sh` measures it; BENCHMARKS.md).
pub const COMPLETE: &str = "\
UPDATE idem_keys
   SET state = 'completed', response_status = $3, response_headers = $4,
       response_body = $5, locked_until = NULL
 WHERE scope = $1 AND idem_key = $2
   AND current_setting('idem.outer_lock_timeout', true) <> ''";

/// [`COMPLETE`] after it updated no row: records the response wherever the connection
/// now is, and returns false when the marker is gone, that is when the handler ended
/// idem's transaction and this ran on its own; no row when the key's row is gone.
const COMPLETE_CHECKED: &str = "\
UPDATE idem_keys
   SET state = 'completed', response_status = $3, response_headers = $4,
       response_body = $5, locked_until = NULL
 WHERE scope = $1 AND idem_key = $2
RETURNING coalesce(current_setting('idem.outer_lock_timeout', true), '') <> ''";

/// [`COMPLETE_CHECKED`] for a body staged by `staged::stage`: $5 is the staged row's
/// nonce, and the row goes in the same statement, whether or not the key's row is still
/// there. It answers one row: whether the staged row was there, whether the key's row was
/// updated, and where the statement ran. A second statement after one that updated
/// nothing would find the staged row gone.
///
/// Inside idem's transaction the staged row is uncommitted, so nothing else can delete
/// it. After a handler ended that transaction itself, the staging committed on its own,
/// and a process that stalls between the two statements for longer than the sweep leaves
/// staged rows (an hour) finds it gone: the key's row is then left alone rather than
/// completed without its body, and the caller stores the body bound instead.
const COMPLETE_STAGED: &str = "\
WITH staged AS (
    DELETE FROM idem_staged_bodies WHERE scope = $1 AND nonce = $5 RETURNING body
),
done AS (
    UPDATE idem_keys
       SET state = 'completed', response_status = $3, response_headers = $4,
           response_body = (SELECT body FROM staged), locked_until = NULL
     WHERE scope = $1 AND idem_key = $2 AND EXISTS (SELECT FROM staged)
    RETURNING true
)
SELECT EXISTS (SELECT FROM staged), EXISTS (SELECT FROM done),
       coalesce(current_setting('idem.outer_lock_timeout', true), '') <> ''";

/// What the claim and [`SELECT_EXISTING`] return.
struct KeyRow {
    /// This statement inserted the row.
    claimed: bool,
    /// Completed and past its retention: a new request may reclaim it.
    expired: bool,
    key: KeyColumns,
}

impl<'r> sqlx::FromRow<'r, PgRow> for KeyRow {
    fn from_row(row: &'r PgRow) -> sqlx::Result<Self> {
        let generation: i64 = row.try_get(0)?;
        let Some(existing) = row.try_get::<Option<ExistingRecord<1>>, _>(1)? else {
            // The first execution of a key: the insert won, and the rest is NULL.
            return Ok(Self {
                claimed: true,
                expired: false,
                key: KeyColumns::claimed(generation),
            });
        };
        let [expired] = existing.flags;
        Ok(Self {
            claimed: false,
            expired,
            key: existing.into_key(generation, row.try_get(2)?),
        })
    }
}

/// Opens every transaction idem runs a request in, whatever the connection's
/// `default_transaction_isolation`. The claim relies on READ COMMITTED: a duplicate that
/// waited for the first request's row must see it committed, which a snapshot taken
/// before (REPEATABLE READ, SERIALIZABLE) cannot, and fails to serialize instead. It is
/// the same one round trip as a bare `BEGIN`. The handler's statements share the
/// transaction, so they run at READ COMMITTED too; PostgreSQL allows no change of level
/// after the claim's first statement.
pub(super) const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// SQLSTATE `lock_not_available`: the claim waited longer than its lock timeout.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// SQLSTATE `in_failed_sql_transaction`: a statement of the handler failed earlier.
const IN_FAILED_SQL_TRANSACTION: &str = "25P02";

fn sqlstate_is(error: &sqlx::Error, code: &str) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|c| c == code)
}

impl Backend for Postgres {
    /// Nothing: every request opens with [`BEGIN`], and the claim itself sets its lock
    /// timeout (see `claim_lock_timeout!`).
    type Opening = ();

    fn opening(_claim_wait: Duration) {}

    async fn begin(
        conn: PoolConnection<Self>,
        (): &(),
    ) -> Result<Transaction<'static, Self>, sqlx::Error> {
        // Safe to drop while it waits for the server's reply since sqlx 0.9.1
        // (transact-rs/sqlx#4394, the workspace's minimum): sqlx counts the transaction
        // before the round trip, so a dropped request queues its rollback rather than
        // handing the pool a connection inside a transaction. `model_single` asserts it.
        Transaction::begin(conn, Some(BEGIN.into_sql_str())).await
    }

    async fn claim(conn: &mut PgConnection, req: &ClaimRequest<'_>) -> Result<Claim, sqlx::Error> {
        let row = bind_claim(sqlx::query_as::<_, KeyRow>(CLAIM), req)
            .bind(claim_wait_ms(req))
            .fetch_optional(&mut *conn)
            .await?;
        match row {
            Some(row) if row.claimed => {
                return Ok(Claim::Claimed {
                    generation: row.key.generation,
                });
            }
            Some(row) if !row.expired => {
                shrink_after(conn, row.key.stored_len());
                return Ok(Claim::Existing(row.key.into_existing()));
            }
            Some(_) | None => {}
        }
        // The key is expired, or its holder committed while we waited: look again
        // with a fresh snapshot.
        for _ in 0..2 {
            if let Some(generation) = reclaim_expired(conn, req).await? {
                return Ok(Claim::Claimed { generation });
            }
            let row = sqlx::query_as::<_, KeyRow>(SELECT_EXISTING)
                .bind(req.scope)
                .bind(req.key)
                .fetch_optional(&mut *conn)
                .await?;
            match row {
                Some(row) if !row.expired => {
                    shrink_after(conn, row.key.stored_len());
                    return Ok(Claim::Existing(row.key.into_existing()));
                }
                Some(_) => continue,
                None => break,
            }
        }
        Ok(Claim::Vanished)
    }

    async fn complete(
        conn: &mut PgConnection,
        req: &ClaimRequest<'_>,
        response: &StoredResponse<'_>,
    ) -> Result<Completion, sqlx::Error> {
        complete_key(conn, req.scope, req.key, response).await
    }

    /// The lease is not read: the one caller answers any key without a final answer 409.
    async fn read_key(
        conn: &mut PgConnection,
        req: &ClaimRequest<'_>,
    ) -> Result<Option<PeekedKey>, sqlx::Error> {
        let row = sqlx::query_as::<_, KeyRow>(SELECT_EXISTING)
            .bind(req.scope)
            .bind(req.key)
            .fetch_optional(&mut *conn)
            .await?;
        Ok(row.map(|row| {
            shrink_after(conn, row.key.stored_len());
            PeekedKey {
                expired: row.expired,
                lease_free: true,
                key: row.key.into_existing(),
            }
        }))
    }

    /// A staged body's completion runs in a task of its own (`shielded`); a bound one's
    /// statement is safe to drop, as every statement sqlx runs outside a `COPY` is.
    async fn complete_shielded(
        mut txn: Transaction<'static, Self>,
        req: &ClaimRequest<'_>,
        response: OwnedResponse,
    ) -> (Transaction<'static, Self>, Result<Completion, sqlx::Error>) {
        if response.body.len() <= staged::STAGE_ABOVE {
            let completion = complete_key(&mut txn, req.scope, req.key, &response.stored()).await;
            return (txn, completion);
        }
        shielded::complete(txn, req, response).await
    }

    fn is_lock_timeout(error: &sqlx::Error) -> bool {
        sqlstate_is(error, LOCK_NOT_AVAILABLE)
    }

    fn is_aborted_transaction(error: &sqlx::Error) -> bool {
        sqlstate_is(error, IN_FAILED_SQL_TRANSACTION)
    }
}

/// The single-transaction completion of `scope`'s `key`: the body bound, or staged first.
async fn complete_key(
    conn: &mut PgConnection,
    scope: &str,
    key: &str,
    response: &StoredResponse<'_>,
) -> Result<Completion, sqlx::Error> {
    let in_transaction = if response.body.len() > staged::STAGE_ABOVE {
        // The staged row goes with the first statement that runs, so a large body is
        // stored by one that also tells where it ran.
        let nonce = staged::stage(conn, scope, response.body).await?;
        let (found, updated, in_transaction): (bool, bool, bool) =
            bind_completion(COMPLETE_STAGED, scope, key, response)
                .bind(nonce)
                .try_map(|row: PgRow| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
                .fetch_one(&mut *conn)
                .await?;
        if found {
            updated.then_some(in_transaction)
        } else {
            // Swept before the completion (see COMPLETE_STAGED), which left the key as it
            // was: the body is bound after all, with the copies staging avoids.
            complete_bound(conn, scope, key, response).await?
        }
    } else {
        complete_bound(conn, scope, key, response).await?
    };
    shrink_after(conn, response.headers.len() + response.body.len());
    Ok(match in_transaction {
        None => Completion::RowGone,
        Some(true) => Completion::Recorded,
        Some(false) => Completion::OutsideTransaction,
    })
}

/// The completion with the body bound: where it ran (`Some(true)` in idem's transaction),
/// or `None` when the key's row is gone.
async fn complete_bound(
    conn: &mut PgConnection,
    scope: &str,
    key: &str,
    response: &StoredResponse<'_>,
) -> sqlx::Result<Option<bool>> {
    let done = bind_completion(COMPLETE, scope, key, response)
        .bind(response.body)
        .execute(&mut *conn)
        .await?;
    if done.rows_affected() > 0 {
        return Ok(Some(true));
    }
    let row = bind_completion(COMPLETE_CHECKED, scope, key, response)
        .bind(response.body)
        .fetch_optional(&mut *conn)
        .await?;
    row.map(|row| row.try_get(0)).transpose()
}

/// sqlx keeps a connection's read and write buffers as large as the largest message they
/// held, for as long as the pool keeps the connection: after a statement that carried a
/// large stored response (a 1 MiB body written by the completion, or read back for a
/// replay), every idle connection of the pool would hold a megabyte or two. Above this
/// size they are given back once the statement is done; below it, keeping them saves
/// growing them again.
const SHRINK_ABOVE: usize = 64 * 1024;

fn shrink_after(conn: &mut PgConnection, stored: usize) {
    if stored > SHRINK_ABOVE {
        // A replay's body still shares the read buffer's memory; the connection lets go
        // of its part and takes a fresh small buffer.
        sqlx::Connection::shrink_buffers(conn);
    }
}

/// Binds $1..$4 of a completion: scope, key, status and header block; $5 is the body,
/// or the nonce it was staged under.
fn bind_completion<'q>(
    sql: &'static str,
    scope: &'q str,
    key: &'q str,
    response: &'q StoredResponse<'_>,
) -> sqlx::query::Query<'q, Postgres, PgArguments> {
    let status = i16::try_from(response.status).expect("HTTP status codes fit in i16");
    sqlx::query(sql)
        .bind(scope)
        .bind(key)
        .bind(status)
        .bind(response.headers)
}

/// The new generation, if the key was reclaimed.
async fn reclaim_expired(
    conn: &mut PgConnection,
    req: &ClaimRequest<'_>,
) -> sqlx::Result<Option<i64>> {
    let reclaimed = bind_claim(sqlx::query_as::<_, (String, i64)>(RECLAIM_EXPIRED), req)
        .fetch_optional(conn)
        .await?;
    Ok(reclaimed.map(|(_, generation)| generation))
}

/// The claim's lock timeout, in the milliseconds PostgreSQL reads a bare number as.
fn claim_wait_ms(req: &ClaimRequest<'_>) -> i64 {
    // `Idem::claim_wait` refuses zero, which PostgreSQL would read as "wait forever";
    // the setting's largest value is i32::MAX ms (24 days).
    i64::try_from(req.claim_wait.as_millis())
        .unwrap_or(i64::MAX)
        .clamp(1, i64::from(i32::MAX))
}

/// Binds $1..$6, shared by the claims and the reclaims of both forms.
fn bind_claim<'q, O>(
    query: QueryAs<'q, Postgres, O, PgArguments>,
    req: &'q ClaimRequest<'_>,
) -> QueryAs<'q, Postgres, O, PgArguments> {
    query
        .bind(req.scope)
        .bind(req.key)
        .bind(req.fingerprint.as_slice())
        .bind(req.method)
        .bind(req.path)
        .bind(req.retention)
}
