//! SQL of the expiry sweep and of the operator's views of the key table, on SQLite.
//!
//! Times are stored as INTEGER microseconds since the Unix epoch, so they are read as
//! they are.

use crate::store::MaintenanceStore;
use sqlx::Pool;
use sqlx::Sqlite;
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::{AssertSqlSafe, SqlitePool};

use super::now;
use crate::store::{
    InProgressRow, InspectRow, KeyRecord, KeyStats, MIGRATIONS_TABLE, Resolved, StateRow,
    StatsRows, StoredResponse, StrandedRow, count, key_record,
};

/// Which rows a sweep may delete: completed, and past their retention. A key still
/// `started` is never deleted, however old: in the phased form it may hold committed
/// phases (money moved) with no final answer, and deleting it would let a late retry
/// start the operation again with new derived keys. Such keys are left for an operator
/// (`stranded!`). Kept in one constant so the sweep, the dry run and `stats` cannot
/// disagree.
const DELETABLE: &str = concat!("state = 'completed' AND expires_at <= ", now!());

/// Keys in progress past their retention with no live lease, left for an operator.
macro_rules! stranded {
    () => {
        concat!(
            "state = 'started' AND expires_at <= ",
            now!(),
            " AND (locked_until IS NULL OR locked_until <= ",
            now!(),
            ")"
        )
    };
}
const STRANDED: &str = stranded!();

impl MaintenanceStore for Sqlite {
    fn migrator() -> Migrator {
        sqlx::migrate!("migrations/sqlite")
    }

    async fn run_migrations(migrator: &Migrator, pool: &Pool<Self>) -> Result<(), MigrateError> {
        migrator.run(pool).await
    }

    /// A scan of the table, stopped at the first hit: an operator's command, run once.
    async fn holds_sealed_responses(pool: &Pool<Self>, marker: &[u8]) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM idem_keys
             WHERE substr(response_body, 1, length($1)) = $1)",
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

    /// One batch: up to `batch_size` rows chosen oldest first through the `expires_at` index
    /// and deleted by `rowid`, the table's own key. The statement commits on its own; SQLite
    /// runs one writer at a time, so concurrent sweeps take turns and never delete a row twice.
    /// The size is a literal, like on PostgreSQL, so the statement is prepared once per size.
    fn batch_statement(batch_size: u32) -> String {
        format!(
            "DELETE FROM idem_keys WHERE rowid IN (
        SELECT rowid FROM idem_keys WHERE {DELETABLE} ORDER BY expires_at LIMIT {batch_size})"
        )
    }

    /// Runs one batch (as built by [`batch_statement`]); returns the rows it deleted (the
    /// phases deleted with them by the foreign key are not counted).
    async fn delete_batch(pool: &SqlitePool, statement: &str) -> sqlx::Result<u64> {
        let done = sqlx::query(AssertSqlSafe(statement.to_owned()))
            .execute(pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// SQLite's plan for a batch (`EXPLAIN QUERY PLAN`, which does not run it), one line
    /// per step.
    async fn explain_batch(pool: &SqlitePool, batch_size: u32) -> sqlx::Result<Vec<String>> {
        let sql = format!("EXPLAIN QUERY PLAN {}", Self::batch_statement(batch_size));
        let rows: Vec<(i64, i64, i64, String)> =
            sqlx::query_as(AssertSqlSafe(sql)).fetch_all(pool).await?;
        Ok(rows.into_iter().map(|row| row.3).collect())
    }

    /// Rows a sweep started now would delete.
    async fn count_deletable(pool: &SqlitePool) -> sqlx::Result<u64> {
        let sql = format!("SELECT count(*) FROM idem_keys WHERE {DELETABLE}");
        let rows: i64 = sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(pool)
            .await?;
        Ok(count(rows))
    }

    /// `(version, success, checksum)` of every migration recorded in idem's history, by
    /// version; `None` when the history table does not exist.
    async fn applied_migrations(
        pool: &SqlitePool,
    ) -> sqlx::Result<Option<Vec<crate::store::AppliedMigration>>> {
        let exists: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = $1)",
        )
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
    async fn key_stats(pool: &SqlitePool) -> sqlx::Result<KeyStats> {
        let mut conn = pool.acquire().await?;
        let rows: Vec<StateRow> = sqlx::query_as(AssertSqlSafe(state_counts()))
            .fetch_all(&mut *conn)
            .await?;
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
        pool: &SqlitePool,
        scope: &str,
        key: &str,
        preview: usize,
    ) -> sqlx::Result<Option<KeyRecord>> {
        let preview = i64::try_from(preview).unwrap_or(i64::MAX);
        let row: Option<InspectRow> = sqlx::query_as(INSPECT)
            .bind(scope)
            .bind(key)
            .bind(preview)
            .fetch_optional(pool)
            .await?;
        Ok(row.map(|row| key_record(scope, key, row)))
    }

    /// How many keys are stranded, and when the oldest was claimed.
    async fn count_stranded(pool: &SqlitePool) -> sqlx::Result<(u64, Option<i64>)> {
        let sql = format!("SELECT count(*), min(created_at) FROM idem_keys WHERE {STRANDED}");
        let (stranded, oldest): (i64, Option<i64>) =
            sqlx::query_as(AssertSqlSafe(sql)).fetch_one(pool).await?;
        Ok((count(stranded), oldest))
    }

    /// Up to `limit` stranded keys, oldest first.
    async fn stranded_keys(pool: &SqlitePool, limit: u32) -> sqlx::Result<Vec<StrandedRow>> {
        sqlx::query_as(STRANDED_KEYS)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
    }

    /// A key's recorded phases, in the order they committed.
    async fn recorded_phases(
        pool: &SqlitePool,
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
        pool: &SqlitePool,
        scope: &str,
        key: &str,
        generation: i64,
        response: &StoredResponse<'_>,
        keep: std::time::Duration,
    ) -> sqlx::Result<Resolved> {
        let mut conn = pool.acquire().await?;
        let token = super::next_attempt(&mut conn).await?;
        let status = i16::try_from(response.status).expect("HTTP status codes fit in i16");
        let done = sqlx::query(RESOLVE)
            .bind(scope)
            .bind(key)
            .bind(status)
            .bind(response.headers)
            .bind(response.body)
            .bind(token)
            .bind(super::micros(keep))
            .bind(generation)
            .execute(&mut *conn)
            .await?;
        if done.rows_affected() == 1 {
            return Ok(Resolved::Done);
        }
        let state: Option<String> = sqlx::query_scalar(WHY_UNRESOLVED)
            .bind(scope)
            .bind(key)
            .fetch_optional(&mut *conn)
            .await?;
        Ok(match state.as_deref() {
            None => Resolved::NotFound,
            Some("completed") => Resolved::AlreadyCompleted,
            Some(_) => Resolved::InLease,
        })
    }
}

const HOUR_US: i64 = 3_600_000_000;

/// One scan counts every state by age, plus the rows a sweep would delete and those in a
/// lease. The age bounds are those documented on [`AgeCounts`].
fn state_counts() -> String {
    let now = now!();
    let day = 24 * HOUR_US;
    let week = 7 * day;
    format!(
        "SELECT state,
       count(*) AS total,
       count(*) FILTER (WHERE created_at > {now} - {HOUR_US}) AS last_hour,
       count(*) FILTER (WHERE created_at <= {now} - {HOUR_US} AND created_at > {now} - {day})
           AS last_day,
       count(*) FILTER (WHERE created_at <= {now} - {day} AND created_at > {now} - {week})
           AS last_week,
       count(*) FILTER (WHERE created_at <= {now} - {week}) AS older,
       count(*) FILTER (WHERE {DELETABLE}) AS deletable,
       count(*) FILTER (WHERE locked_until > {now}) AS in_lease,
       count(*) FILTER (WHERE {STRANDED}) AS stranded
  FROM idem_keys
 GROUP BY state
 ORDER BY state"
    )
}

const OLDEST_IN_PROGRESS: &str = "\
SELECT scope, idem_key, recovery_point, created_at, locked_until
  FROM idem_keys WHERE state = 'started' ORDER BY created_at LIMIT 1";

const OLDEST_STRANDED: &str = concat!(
    "SELECT scope, idem_key, recovery_point, created_at, locked_until
  FROM idem_keys WHERE ",
    stranded!(),
    " ORDER BY created_at LIMIT 1"
);

/// Page bytes from the `dbstat` table (compiled into the bundled SQLite): the table's
/// b-tree with its overflow pages (where large response bodies live), and each index.
const TABLE_SIZE: &str = "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = 'idem_keys'";

const INDEX_SIZES: &str = "\
SELECT m.name, coalesce((SELECT sum(pgsize) FROM dbstat d WHERE d.name = m.name), 0)
  FROM sqlite_master m
 WHERE m.type = 'index' AND m.tbl_name = 'idem_keys'
 ORDER BY m.name";

/// Reads only the first `$3` bytes of the body: a stored body may be megabytes long.
const INSPECT: &str = "\
SELECT state, recovery_point, request_hash, method, path, created_at, expires_at,
       locked_until, response_status, response_headers, length(response_body) AS body_len,
       substr(response_body, 1, $3) AS body_head
  FROM idem_keys WHERE scope = $1 AND idem_key = $2";

const STRANDED_KEYS: &str = concat!(
    "SELECT scope, idem_key, method, path, recovery_point, created_at, expires_at,
       locked_until, generation
  FROM idem_keys WHERE ",
    stranded!(),
    " ORDER BY created_at LIMIT $1"
);

const RECORDED_PHASES: &str = "\
SELECT phase, output, recorded_at FROM idem_phases
 WHERE scope = $1 AND idem_key = $2
 ORDER BY recorded_at, phase";

/// Completes a started key with a free lease; `$6` is a fresh fencing token, so an
/// attempt still running past its lease can record nothing more.
const RESOLVE: &str = concat!(
    "UPDATE idem_keys
   SET state = 'completed', response_status = $3, response_headers = $4, response_body = $5,
       locked_until = NULL, fencing_token = $6, expires_at = ",
    now!(),
    " + $7
 WHERE scope = $1 AND idem_key = $2 AND state = 'started' AND generation = $8
   AND (locked_until IS NULL OR locked_until <= ",
    now!(),
    ")"
);

const WHY_UNRESOLVED: &str = "SELECT state FROM idem_keys WHERE scope = $1 AND idem_key = $2";

#[cfg(feature = "testing")]
impl crate::store::TestingStore for Sqlite {
    async fn test_key_row(
        pool: &SqlitePool,
        key: &str,
    ) -> sqlx::Result<Option<crate::store::TestKeyRow>> {
        sqlx::query_as(concat!(
            "SELECT state, recovery_point, coalesce(locked_until > ",
            now!(),
            ", 0) AS leased FROM idem_keys WHERE idem_key = $1"
        ))
        .bind(key)
        .fetch_optional(pool)
        .await
    }

    async fn test_end_lease(pool: &SqlitePool, key: &str) -> sqlx::Result<u64> {
        let done = sqlx::query(concat!(
            "UPDATE idem_keys SET locked_until = ",
            now!(),
            " - 1000000 WHERE idem_key = $1 AND locked_until IS NOT NULL"
        ))
        .bind(key)
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn test_age_key(pool: &SqlitePool, key: &str) -> sqlx::Result<u64> {
        let done = sqlx::query(concat!(
            "UPDATE idem_keys SET expires_at = ",
            now!(),
            " - 1000000, locked_until = CASE WHEN locked_until IS NULL THEN NULL ELSE ",
            now!(),
            " - 1000000 END WHERE idem_key = $1"
        ))
        .bind(key)
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn test_expiry_index(pool: &SqlitePool) -> sqlx::Result<bool> {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'index' \
             AND tbl_name = 'idem_keys' AND name = 'idem_keys_expires_at')",
        )
        .fetch_one(pool)
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_deletes_by_rowid_with_its_size_as_a_literal() {
        let sql = Sqlite::batch_statement(250);
        assert!(sql.contains("LIMIT 250"), "{sql}");
        assert!(sql.contains("rowid IN"), "{sql}");
    }
}
