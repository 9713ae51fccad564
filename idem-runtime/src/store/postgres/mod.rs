//! The PostgreSQL key store: all of idem's SQL for PostgreSQL lives in this module, one
//! file per concern (the single-transaction claim here, the others beside it).

pub(crate) mod expiry;
mod inbox;
mod outbox;
mod phased;

use std::time::Duration;

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::{PgArguments, PgConnection};
use sqlx::query::QueryAs;
use sqlx::{PgPool, Postgres, Transaction};

use super::{
    AttemptRef, AttemptRow, Backend, Claim, ClaimRequest, Completion, ExistingKey, OutboxRow,
    PhaseRecord, PhasedClaim, Resolved, StoredResponse, StrandedRow,
};
use crate::Idem;
use crate::fingerprint::Fingerprint;

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

/// Inserts the key, or returns the row that holds it. `DO NOTHING` (rather than
/// `DO UPDATE`) takes no row lock on an existing key, so concurrent replays of one key
/// do not queue behind each other. When the insert wins, its RETURNING clause restores
/// the application's lock timeout in the same statement.
///
/// A row that another transaction committed while this insert waited for it is not in
/// this statement's snapshot; the caller then reads it with `SELECT_EXISTING`.
///
/// Every new row draws its generation, so that no two lives of a key share one: the
/// stored response of one life is sealed to it and does not open in another.
pub const CLAIM: &str = concat!(
    "WITH cfg AS MATERIALIZED (",
    claim_lock_timeout!("$7"),
    "),
ins AS (
    INSERT INTO idem_keys (scope, idem_key, request_hash, method, path, expires_at, generation)
    SELECT $1, $2, $3, $4, $5, now() + $6, nextval('idem_attempts') FROM cfg
    ON CONFLICT (scope, idem_key) DO NOTHING
    RETURNING set_config('lock_timeout', current_setting('idem.outer_lock_timeout'), true),
              generation
)
SELECT true AS claimed, false AS expired, NULL::bytea AS request_hash, NULL::text AS method,
       NULL::text AS path, NULL::text AS state, NULL::smallint AS response_status,
       NULL::bytea AS response_headers, NULL::bytea AS response_body, generation
  FROM ins
UNION ALL
SELECT false, k.expires_at <= now() AND k.state = 'completed', k.request_hash, k.method,
       k.path, k.state, k.response_status, k.response_headers, k.response_body, k.generation
  FROM idem_keys k
 WHERE k.scope = $1 AND k.idem_key = $2 AND NOT EXISTS (SELECT FROM ins)"
);

const SELECT_EXISTING: &str = "\
SELECT false, expires_at <= now() AND state = 'completed', request_hash, method, path, state,
       response_status, response_headers, response_body, generation
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

/// The RETURNING value is false when the transaction-local marker set at `BEGIN` is
/// gone, which means the handler ended idem's transaction and this ran on its own.
pub const COMPLETE: &str = "\
UPDATE idem_keys
   SET state = 'completed', response_status = $3, response_headers = $4,
       response_body = $5, locked_until = NULL
 WHERE scope = $1 AND idem_key = $2
RETURNING coalesce(current_setting('idem.outer_lock_timeout', true), '') <> ''";

type KeyRow = (
    bool,
    bool,
    Option<Vec<u8>>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i16>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    i64,
);

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
    /// [`BEGIN`]: the claim itself sets its lock timeout (see `claim_lock_timeout!`).
    fn begin_sql(_claim_wait: Duration) -> String {
        BEGIN.to_owned()
    }

    async fn begin(idem: &Idem<Self>) -> Result<Transaction<'static, Self>, sqlx::Error> {
        idem.pool().begin_with(BEGIN).await
    }

    async fn claim(conn: &mut PgConnection, req: &ClaimRequest<'_>) -> Result<Claim, sqlx::Error> {
        let row = bind_claim(sqlx::query_as::<_, KeyRow>(CLAIM), req)
            .bind(claim_wait_ms(req))
            .fetch_optional(&mut *conn)
            .await?;
        match row {
            Some(row) if row.0 => return Ok(Claim::Claimed { generation: row.9 }),
            Some(row) if !row.1 => return Ok(Claim::Existing(existing(row))),
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
                Some(row) if !row.1 => return Ok(Claim::Existing(existing(row))),
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
        let status = i16::try_from(response.status).expect("HTTP status codes fit in i16");
        let in_transaction: Option<bool> = sqlx::query_scalar(COMPLETE)
            .bind(req.scope)
            .bind(req.key)
            .bind(status)
            .bind(response.headers)
            .bind(response.body)
            .fetch_optional(conn)
            .await?;
        Ok(match in_transaction {
            None => Completion::RowGone,
            Some(true) => Completion::Recorded,
            Some(false) => Completion::OutsideTransaction,
        })
    }

    fn is_lock_timeout(error: &sqlx::Error) -> bool {
        sqlstate_is(error, LOCK_NOT_AVAILABLE)
    }

    fn is_aborted_transaction(error: &sqlx::Error) -> bool {
        sqlstate_is(error, IN_FAILED_SQL_TRANSACTION)
    }

    async fn claim_phased(
        conn: &mut PgConnection,
        req: &ClaimRequest<'_>,
        lease: Duration,
    ) -> Result<PhasedClaim, sqlx::Error> {
        phased::claim(conn, req, lease).await
    }

    async fn take_over(
        conn: &mut PgConnection,
        req: &ClaimRequest<'_>,
        seen: i64,
        lease: Duration,
    ) -> Result<Option<AttemptRow>, sqlx::Error> {
        phased::take_over(conn, req, seen, lease).await
    }

    async fn begin_phase(idem: &Idem<Self>) -> Result<Transaction<'static, Self>, sqlx::Error> {
        phased::begin_phase(idem).await
    }

    async fn record_phase(
        conn: &mut PgConnection,
        attempt: &AttemptRef<'_>,
        phase: &str,
        output: &str,
    ) -> Result<PhaseRecord, sqlx::Error> {
        phased::record_phase(conn, attempt, phase, output).await
    }

    async fn extend_lease(
        conn: &mut PgConnection,
        attempt: &AttemptRef<'_>,
    ) -> Result<bool, sqlx::Error> {
        phased::extend_lease(conn, attempt).await
    }

    async fn release_lease(
        conn: &mut PgConnection,
        attempt: &AttemptRef<'_>,
    ) -> Result<(), sqlx::Error> {
        phased::release_lease(conn, attempt).await
    }

    async fn complete_phased(
        conn: &mut PgConnection,
        attempt: &AttemptRef<'_>,
        response: &StoredResponse<'_>,
    ) -> Result<bool, sqlx::Error> {
        phased::complete(conn, attempt, response).await
    }

    async fn enqueue(
        conn: &mut PgConnection,
        topic: &str,
        payload: &str,
    ) -> Result<String, sqlx::Error> {
        outbox::enqueue(conn, topic, payload).await
    }

    async fn take_messages(
        conn: &mut PgConnection,
        limit: u32,
        hold: Duration,
        holder: i64,
    ) -> Result<Vec<OutboxRow>, sqlx::Error> {
        outbox::take(conn, limit, hold, holder).await
    }

    async fn claim_message(
        conn: &mut PgConnection,
        id: &str,
        holder: i64,
        hold: Duration,
    ) -> Result<Option<i32>, sqlx::Error> {
        outbox::claim(conn, id, holder, hold).await
    }

    async fn renew_message(
        conn: &mut PgConnection,
        id: &str,
        holder: i64,
        hold: Duration,
    ) -> Result<bool, sqlx::Error> {
        outbox::renew(conn, id, holder, hold).await
    }

    async fn mark_delivered(
        conn: &mut PgConnection,
        id: &str,
        holder: i64,
    ) -> Result<bool, sqlx::Error> {
        outbox::mark_delivered(conn, id, holder).await
    }

    async fn mark_failed(
        conn: &mut PgConnection,
        id: &str,
        holder: i64,
        retry_in: Duration,
        error: &str,
    ) -> Result<bool, sqlx::Error> {
        outbox::mark_failed(conn, id, holder, retry_in, error).await
    }

    async fn release_messages(
        conn: &mut PgConnection,
        ids: &[String],
        holder: i64,
    ) -> Result<u64, sqlx::Error> {
        outbox::release(conn, ids, holder).await
    }

    async fn purge_delivered(
        conn: &mut PgConnection,
        age: Duration,
        limit: u32,
    ) -> Result<u64, sqlx::Error> {
        outbox::purge_delivered(conn, age, limit).await
    }

    fn migrator() -> Migrator {
        sqlx::migrate!("migrations/postgres")
    }

    async fn run_migrations(migrator: &Migrator, pool: &PgPool) -> Result<(), MigrateError> {
        migrator.run(pool).await
    }

    fn batch_statement(batch_size: u32) -> String {
        expiry::batch_script(batch_size)
    }

    async fn delete_batch(pool: &PgPool, statement: &str) -> Result<u64, sqlx::Error> {
        expiry::delete_batch(pool, statement).await
    }

    async fn explain_batch(pool: &PgPool, batch_size: u32) -> Result<Vec<String>, sqlx::Error> {
        expiry::explain_batch(pool, batch_size).await
    }

    async fn count_deletable(pool: &PgPool) -> Result<u64, sqlx::Error> {
        expiry::count_deletable(pool).await
    }

    async fn applied_migrations(
        pool: &PgPool,
    ) -> Result<Option<Vec<super::AppliedMigration>>, sqlx::Error> {
        expiry::applied_migrations(pool).await
    }

    async fn key_stats(pool: &PgPool) -> Result<crate::KeyStats, sqlx::Error> {
        expiry::key_stats(pool).await
    }

    async fn inspect_key(
        pool: &PgPool,
        scope: &str,
        key: &str,
        preview: usize,
    ) -> Result<Option<crate::KeyRecord>, sqlx::Error> {
        expiry::inspect_key(pool, scope, key, preview).await
    }

    async fn count_stranded(pool: &PgPool) -> Result<(u64, Option<i64>), sqlx::Error> {
        expiry::count_stranded(pool).await
    }

    async fn stranded_keys(pool: &PgPool, limit: u32) -> Result<Vec<StrandedRow>, sqlx::Error> {
        expiry::stranded_keys(pool, limit).await
    }

    async fn recorded_phases(
        pool: &PgPool,
        scope: &str,
        key: &str,
    ) -> Result<Vec<(String, String, i64)>, sqlx::Error> {
        expiry::recorded_phases(pool, scope, key).await
    }

    async fn generation_of(
        pool: &PgPool,
        scope: &str,
        key: &str,
    ) -> Result<Option<i64>, sqlx::Error> {
        sqlx::query_scalar("SELECT generation FROM idem_keys WHERE scope = $1 AND idem_key = $2")
            .bind(scope)
            .bind(key)
            .fetch_optional(pool)
            .await
    }

    async fn resolve_key(
        pool: &PgPool,
        scope: &str,
        key: &str,
        generation: i64,
        response: &StoredResponse<'_>,
        keep: Duration,
    ) -> Result<Resolved, sqlx::Error> {
        expiry::resolve_key(pool, scope, key, generation, response, keep).await
    }
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
        .bind(req.fingerprint.as_bytes().as_slice())
        .bind(req.method)
        .bind(req.path)
        .bind(req.retention)
}

fn existing(row: KeyRow) -> ExistingKey {
    let (_, _, hash, method, path, state, status, headers, body, generation) = row;
    existing_key(
        hash,
        method,
        path,
        state,
        (status, headers, body),
        generation,
    )
}

/// A key row's columns as the protocol reads them; shared by both forms' claims.
fn existing_key(
    hash: Option<Vec<u8>>,
    method: Option<String>,
    path: Option<String>,
    state: Option<String>,
    (response_status, response_headers, response_body): super::StoredColumns,
    generation: i64,
) -> ExistingKey {
    ExistingKey {
        fingerprint: hash.as_deref().and_then(Fingerprint::from_bytes),
        method: method.unwrap_or_default(),
        path: path.unwrap_or_default(),
        completed: state.as_deref() == Some("completed"),
        response_status,
        response_headers,
        response_body,
        generation,
    }
}
