//! SQL of the expiry sweep and of the operator's views of the key table.
//!
//! Timestamps are read as microseconds since the Unix epoch (`int8`) so that sqlx needs
//! no date-time feature and the values do not depend on the session's `TimeZone` or
//! `DateStyle`.

use crate::store::MaintenanceStore;
use sqlx::Pool;
use sqlx::Postgres;
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::{AssertSqlSafe, PgPool, Row};

use crate::store::{
    InProgressRow, InspectRow, KeyRecord, KeyStats, MIGRATIONS_TABLE, Resolved, StateRow,
    StatsRows, StoredResponse, StrandedRow, count, key_record,
};

/// Which rows a sweep may delete: completed, and past their retention. A key still
/// `started` is never deleted, however old: in the phased form it may hold committed
/// phases (money moved) with no final answer, and deleting it would let a late retry
/// start the operation again with new derived keys. Such keys are left for an operator
/// (`stranded!`). Kept in one macro so the sweep, the dry run and `stats` cannot
/// disagree.
macro_rules! deletable {
    () => {
        "state = 'completed' AND expires_at <= now()"
    };
}
const DELETABLE: &str = deletable!();

/// Keys in progress past their retention with no live lease: a phased operation that
/// committed phases, or crashed before its first, and whose client has not come back.
/// Counted by `stats`, listed by `stranded_keys`, resolved by an operator.
macro_rules! stranded {
    () => {
        "state = 'started' AND expires_at <= now() \
         AND (locked_until IS NULL OR locked_until <= clock_timestamp())"
    };
}

impl MaintenanceStore for Postgres {
    fn migrator() -> Migrator {
        let mut migrator = sqlx::migrate!("migrations/postgres");
        // sqlx's own lock is session-level (`pg_advisory_lock` .. `pg_advisory_unlock` in
        // separate statements): behind a transaction pooler the unlock can reach another
        // server connection than the lock, which then stays held and blocks the next
        // instance for good. `run_migrations` takes a transaction-level lock instead.
        migrator.set_locking(false);
        migrator
    }

    async fn run_migrations(migrator: &Migrator, pool: &Pool<Self>) -> Result<(), MigrateError> {
        // One transaction for the whole run: the lock is released by COMMIT or ROLLBACK
        // (or the server when the connection dies), whichever server connection a pooler
        // gave us, and no statement of the run lands on another one. Each migration is a
        // savepoint inside it; none of idem's is `-- no-transaction` (a unit test checks).
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(super::MIGRATION_LOCK)
            .execute(&mut *tx)
            .await?;
        // `run_direct` is `run` on a connection already held: `run(&mut *tx)` trips over
        // the higher-ranked `Acquire` bound once the future must be `Send` (sqlx keeps it
        // public for exactly this).
        migrator.run_direct(None, &mut *tx, false).await?;
        tx.commit().await?;
        Ok(())
    }

    /// A scan of the table, stopped at the first hit: an operator's command, run once.
    async fn holds_sealed_responses(pool: &Pool<Self>, marker: &[u8]) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM idem_keys
             WHERE substring(response_body FROM 1 FOR octet_length($1)) = $1)",
        )
        .bind(marker)
        .fetch_one(pool)
        .await
    }

    async fn generation_of(
        pool: &Pool<Self>,
        scope: &str,
        key: &str,
    ) -> Result<Option<i64>, sqlx::Error> {
        sqlx::query_scalar("SELECT generation FROM idem_keys WHERE scope = $1 AND idem_key = $2")
            .bind(scope)
            .bind(key)
            .fetch_optional(pool)
            .await
    }

    /// One batch of the sweep, with its size as a literal: a script of three statements sent
    /// as one simple query, which PostgreSQL runs as one implicit transaction (so the
    /// `SET LOCAL`s end with it, and an error rolls all of it back).
    ///
    /// - The rows are chosen through the `expires_at` index, oldest first, and deleted by
    ///   primary key, never by `ctid`: the statement also suits PostgreSQL-compatible
    ///   distributed databases, where `ctid` does not exist or is not stable.
    /// - `FOR UPDATE SKIP LOCKED` lets several instances sweep at once: each batch locks the
    ///   rows it will delete and the others pass over them instead of waiting, so no sweep
    ///   blocks another or a request that holds a key (a claim reclaiming an expired key
    ///   locks it), and no row is counted by two sweeps. The lock also re-checks the
    ///   condition on the row's newest version, so a key reclaimed since the statement began
    ///   is not deleted.
    /// - `MATERIALIZED` makes the CTE run exactly once. Inlined, the planner could place it
    ///   on the inner side of a join and rescan it, and every rescan of a `SKIP LOCKED ..
    ///   LIMIT` query may pick different rows.
    /// - The size is a literal, not a bind parameter: after five executions PostgreSQL may
    ///   switch a prepared statement to a generic plan, which estimates `LIMIT $1` as a
    ///   tenth of the table and can then prefer a sequential scan and a sort.
    /// - Hash and merge joins are switched off for this transaction only. The cost model
    ///   assumes uncached random reads, so on a key table of some 100 000 rows it joins the
    ///   batch by hashing a sequential scan of the whole table: 76 to 108 ms per batch of
    ///   1000 where the primary-key lookups it would otherwise do take 13 to 16 ms
    ///   (PostgreSQL 15). A batch must cost what its size costs, not what the table's does.
    fn batch_statement(batch_size: u32) -> String {
        format!("{PRIMARY_KEY_JOIN} {}", delete_statement(batch_size))
    }

    /// Runs one batch (as built by [`batch_script`]); returns the rows it deleted.
    async fn delete_batch(pool: &PgPool, script: &str) -> sqlx::Result<u64> {
        // `raw_sql`: a multi-statement script needs the simple query protocol. The
        // `SET LOCAL`s affect no rows, so the total is the DELETE's.
        let done = sqlx::raw_sql(AssertSqlSafe(script)).execute(pool).await?;
        Ok(done.rows_affected())
    }

    /// A staged body no completion will take: one a completion outside a transaction
    /// staged (a handler that committed idem's transaction itself) and whose `UPDATE`
    /// then failed, or never ran because the process stopped. Every other staged row is
    /// its transaction's until the completion deletes it, and no other transaction sees
    /// it. An hour is far beyond the one round trip between the two statements of a
    /// completion outside a transaction, so a row of a completion under way is never
    /// taken from it. Rows some other sweep is deleting are skipped.
    fn orphans_batch_statement(batch_size: u32) -> Option<String> {
        Some(format!(
            "DELETE FROM idem_staged_bodies WHERE (scope, nonce) IN (
    SELECT scope, nonce FROM idem_staged_bodies WHERE staged_at < now() - interval '1 hour'
    LIMIT {batch_size} FOR UPDATE SKIP LOCKED)"
        ))
    }

    /// The plan PostgreSQL chooses for a batch of `batch_size`, one plan line per element,
    /// under the batch's own settings. `EXPLAIN` without `ANALYZE` plans the statement but
    /// does not run it, so nothing is deleted or locked.
    async fn explain_batch(pool: &PgPool, batch_size: u32) -> sqlx::Result<Vec<String>> {
        let script = format!(
            "{PRIMARY_KEY_JOIN} EXPLAIN {}",
            delete_statement(batch_size)
        );
        let rows = sqlx::raw_sql(AssertSqlSafe(script)).fetch_all(pool).await?;
        rows.iter().map(|row| row.try_get(0)).collect()
    }

    /// Rows a sweep started now would delete (rows locked by others included).
    async fn count_deletable(pool: &PgPool) -> sqlx::Result<u64> {
        let sql = format!("SELECT count(*) FROM idem_keys WHERE {DELETABLE}");
        let count: i64 = sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(pool)
            .await?;
        Ok(count.unsigned_abs())
    }

    /// `(version, success, checksum)` of every migration recorded in idem's history, by
    /// version; `None` when the history table does not exist.
    async fn applied_migrations(
        pool: &PgPool,
    ) -> sqlx::Result<Option<Vec<crate::store::AppliedMigration>>> {
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(MIGRATIONS_TABLE)
            .fetch_one(pool)
            .await?;
        if !exists {
            return Ok(None);
        }
        // The table name is idem's own constant, not input.
        let sql =
            format!("SELECT version, success, checksum FROM {MIGRATIONS_TABLE} ORDER BY version");
        let rows = sqlx::query_as(AssertSqlSafe(sql)).fetch_all(pool).await?;
        Ok(Some(rows))
    }

    /// Counts by state and age, the oldest key in progress, and the sizes on disk.
    async fn key_stats(pool: &PgPool) -> sqlx::Result<KeyStats> {
        let mut conn = pool.acquire().await?;
        let rows: Vec<StateRow> = sqlx::query_as(STATE_COUNTS).fetch_all(&mut *conn).await?;
        let oldest: Option<InProgressRow> = sqlx::query_as(OLDEST_IN_PROGRESS)
            .fetch_optional(&mut *conn)
            .await?;
        let oldest_stranded: Option<InProgressRow> = sqlx::query_as(OLDEST_STRANDED)
            .fetch_optional(&mut *conn)
            .await?;
        let table_bytes: i64 = sqlx::query_scalar(TABLE_SIZE).fetch_one(&mut *conn).await?;
        let index_rows: Vec<(String, i64)> =
            sqlx::query_as(INDEX_SIZES).fetch_all(&mut *conn).await?;
        Ok(StatsRows {
            states: rows,
            oldest,
            oldest_stranded,
            table_bytes,
            indexes: index_rows,
        }
        .into())
    }

    /// One key row, with at most `preview` bytes of its stored body.
    async fn inspect_key(
        pool: &PgPool,
        scope: &str,
        key: &str,
        preview: usize,
    ) -> sqlx::Result<Option<KeyRecord>> {
        let preview = i32::try_from(preview).unwrap_or(i32::MAX);
        let row: Option<InspectRow> = sqlx::query_as(INSPECT)
            .bind(scope)
            .bind(key)
            .bind(preview)
            .fetch_optional(pool)
            .await?;
        Ok(row.map(|row| key_record(scope, key, row)))
    }

    /// How many keys are stranded, and when the oldest was claimed.
    async fn count_stranded(pool: &PgPool) -> sqlx::Result<(u64, Option<i64>)> {
        // In a transaction of its own, like the relay's statements: the expiry task runs
        // it outside any request, and a transaction pooler keeps a prepared statement on
        // one server connection only inside a transaction.
        let mut tx = pool.begin().await?;
        let (stranded, oldest): (i64, Option<i64>) =
            sqlx::query_as(COUNT_STRANDED).fetch_one(&mut *tx).await?;
        tx.commit().await?;
        Ok((count(stranded), oldest))
    }

    /// Up to `limit` stranded keys, oldest first.
    async fn stranded_keys(pool: &PgPool, limit: u32) -> sqlx::Result<Vec<StrandedRow>> {
        sqlx::query_as(STRANDED_KEYS)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
    }

    /// A key's recorded phases, in the order they committed.
    async fn recorded_phases(
        pool: &PgPool,
        scope: &str,
        key: &str,
    ) -> sqlx::Result<Vec<(String, String, i64)>> {
        sqlx::query_as(RECORDED_PHASES)
            .bind(scope)
            .bind(key)
            .fetch_all(pool)
            .await
    }

    /// Resolves a started key with `response`, kept for `keep` from now.
    async fn resolve_key(
        pool: &PgPool,
        scope: &str,
        key: &str,
        generation: i64,
        response: &StoredResponse<'_>,
        keep: std::time::Duration,
    ) -> sqlx::Result<Resolved> {
        let status = i16::try_from(response.status).expect("HTTP status codes fit in i16");
        // The state is read in the statement's snapshot, from before the update.
        let (done, state): (bool, Option<String>) = sqlx::query_as(RESOLVE)
            .bind(scope)
            .bind(key)
            .bind(status)
            .bind(response.headers)
            .bind(response.body)
            .bind(keep)
            .bind(generation)
            .fetch_one(pool)
            .await?;
        Ok(match (done, state.as_deref()) {
            (true, _) => Resolved::Done,
            (false, None) => Resolved::NotFound,
            (false, Some("completed")) => Resolved::AlreadyCompleted,
            (false, Some(_)) => Resolved::InLease,
        })
    }
}

const PRIMARY_KEY_JOIN: &str = "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off;";

fn delete_statement(batch_size: u32) -> String {
    format!(
        "WITH batch AS MATERIALIZED (
    SELECT scope, idem_key
      FROM idem_keys
     WHERE {DELETABLE}
     ORDER BY expires_at
     LIMIT {batch_size}
       FOR UPDATE SKIP LOCKED
)
DELETE FROM idem_keys k
 USING batch
 WHERE k.scope = batch.scope AND k.idem_key = batch.idem_key"
    )
}

/// Microseconds since the Unix epoch of a `timestamptz` expression.
macro_rules! micros {
    ($column:literal) => {
        concat!("(extract(epoch FROM ", $column, ") * 1000000)::int8")
    };
}

/// One scan counts every state by age, plus the rows a sweep would delete and those in a
/// lease. The age bounds are those documented on [`AgeCounts`].
const STATE_COUNTS: &str = concat!(
    "\
SELECT state,
       count(*) AS total,
       count(*) FILTER (WHERE created_at > now() - interval '1 hour') AS last_hour,
       count(*) FILTER (WHERE created_at <= now() - interval '1 hour'
                          AND created_at > now() - interval '1 day') AS last_day,
       count(*) FILTER (WHERE created_at <= now() - interval '1 day'
                          AND created_at > now() - interval '7 days') AS last_week,
       count(*) FILTER (WHERE created_at <= now() - interval '7 days') AS older,
       count(*) FILTER (WHERE ",
    deletable!(),
    ") AS deletable,
       count(*) FILTER (WHERE locked_until > now()) AS in_lease,
       count(*) FILTER (WHERE ",
    stranded!(),
    ") AS stranded
  FROM idem_keys
 GROUP BY state
 ORDER BY state"
);

const OLDEST_IN_PROGRESS: &str = concat!(
    "SELECT scope, idem_key, recovery_point, ",
    micros!("created_at"),
    " AS created_at, ",
    micros!("locked_until"),
    " AS locked_until FROM idem_keys WHERE state = 'started' ORDER BY created_at LIMIT 1"
);

const OLDEST_STRANDED: &str = concat!(
    "SELECT scope, idem_key, recovery_point, ",
    micros!("created_at"),
    " AS created_at, ",
    micros!("locked_until"),
    " AS locked_until FROM idem_keys WHERE ",
    stranded!(),
    " ORDER BY created_at LIMIT 1"
);

/// `pg_table_size` counts the heap with its TOAST table (where large response bodies
/// live), free space and visibility maps, but no index.
const TABLE_SIZE: &str = "SELECT pg_table_size('idem_keys'::regclass)";

const INDEX_SIZES: &str = "\
SELECT c.relname::text, pg_relation_size(i.indexrelid)
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = 'idem_keys'::regclass
 ORDER BY c.relname";

/// Reads only the first `$3` bytes of the body: a stored body may be megabytes long.
#[cfg(feature = "testing")]
impl crate::store::TestingStore for Postgres {
    async fn test_key_row(
        pool: &PgPool,
        key: &str,
    ) -> sqlx::Result<Option<crate::store::TestKeyRow>> {
        sqlx::query_as(
            "SELECT state, recovery_point, \
             coalesce(locked_until > clock_timestamp(), false) AS leased \
             FROM idem_keys WHERE idem_key = $1",
        )
        .bind(key)
        .fetch_optional(pool)
        .await
    }

    async fn test_end_lease(pool: &PgPool, key: &str) -> sqlx::Result<u64> {
        let done = sqlx::query(
            "UPDATE idem_keys SET locked_until = clock_timestamp() - interval '1 second' \
             WHERE idem_key = $1 AND locked_until IS NOT NULL",
        )
        .bind(key)
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn test_age_key(pool: &PgPool, key: &str) -> sqlx::Result<u64> {
        let done = sqlx::query(
            "UPDATE idem_keys SET expires_at = now() - interval '1 second', \
             locked_until = CASE WHEN locked_until IS NULL THEN NULL \
             ELSE now() - interval '1 second' END \
             WHERE idem_key = $1",
        )
        .bind(key)
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn test_expiry_index(pool: &PgPool) -> sqlx::Result<bool> {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_indexes \
             WHERE tablename = 'idem_keys' AND indexname = 'idem_keys_expires_at' \
             AND schemaname = current_schema())",
        )
        .fetch_one(pool)
        .await
    }
}

const INSPECT: &str = concat!(
    "SELECT state, recovery_point, request_hash, method, path, ",
    micros!("created_at"),
    " AS created_at, ",
    micros!("expires_at"),
    " AS expires_at, ",
    micros!("locked_until"),
    " AS locked_until, response_status, response_headers, \
     octet_length(response_body)::int8 AS body_len, \
     substring(response_body FROM 1 FOR $3) AS body_head \
     FROM idem_keys WHERE scope = $1 AND idem_key = $2"
);

const COUNT_STRANDED: &str = concat!(
    "SELECT count(*), min(",
    micros!("created_at"),
    ") FROM idem_keys WHERE ",
    stranded!()
);

const STRANDED_KEYS: &str = concat!(
    "SELECT scope, idem_key, method, path, recovery_point, ",
    micros!("created_at"),
    " AS created_at, ",
    micros!("expires_at"),
    " AS expires_at, ",
    micros!("locked_until"),
    " AS locked_until, generation FROM idem_keys WHERE ",
    stranded!(),
    " ORDER BY created_at LIMIT $1"
);

const RECORDED_PHASES: &str = concat!(
    "SELECT phase, output::text, ",
    micros!("recorded_at"),
    " FROM idem_phases WHERE scope = $1 AND idem_key = $2 ORDER BY recorded_at, phase"
);

/// Completes a started key with a free lease under a new fencing token, so an attempt
/// still running past its lease can record nothing more; or says why it did not.
const RESOLVE: &str = "\
WITH done AS (
    UPDATE idem_keys
       SET state = 'completed', response_status = $3, response_headers = $4,
           response_body = $5, locked_until = NULL,
           fencing_token = nextval('idem_attempts'), expires_at = now() + $6
     WHERE scope = $1 AND idem_key = $2 AND state = 'started' AND generation = $7
       AND (locked_until IS NULL OR locked_until <= clock_timestamp())
    RETURNING 1
)
SELECT EXISTS (SELECT FROM done),
       (SELECT state FROM idem_keys WHERE scope = $1 AND idem_key = $2)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_script_carries_its_size_as_a_literal() {
        let sql = Postgres::batch_statement(250);
        assert!(sql.contains("LIMIT 250"), "{sql}");
        assert!(sql.contains("FOR UPDATE SKIP LOCKED"), "{sql}");
        assert!(!sql.contains("ctid"), "{sql}");
    }

    #[test]
    fn every_migration_can_run_inside_the_migration_transaction() {
        // `run_migrations` applies them all inside one transaction that holds the lock; a
        // `-- no-transaction` migration (CREATE INDEX CONCURRENTLY, say) cannot run there.
        let migrator = <Postgres as MaintenanceStore>::migrator();
        assert!(migrator.iter().count() > 0);
        for migration in migrator.iter() {
            assert!(
                !migration.no_tx,
                "migration {} is -- no-transaction: run_migrations needs another design for it",
                migration.version
            );
        }
        assert!(!migrator.locking, "sqlx's session-level lock must stay off");
    }
}
