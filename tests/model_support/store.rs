//! The database side of the model: the statements each backend spells its own way (time
//! moves, resets, the effects the handler records), and the effects table.

use actix_web::web::Bytes;
use proptest::test_runner::TestCaseError;
use sqlx::{AssertSqlSafe, Pool};

use crate::support::{Env, TestBackend};

/// The part of the database each backend spells differently, and the effects table.
pub(crate) trait ModelStore: TestBackend {
    /// A moment one second ago, as the key and outbox tables store times.
    const PAST: &'static str;

    /// `idem_keys.response_body` as text (the model's bodies are JSON).
    const BODY_TEXT: &'static str;

    /// Counts the other sessions of this database that sit inside a transaction with
    /// no statement running: once every connection is back in the pool, a transaction
    /// still open there is one a dropped request left, and whoever takes that
    /// connection next runs inside it. `None` for SQLite, which shows no other
    /// connection's state; a transaction left open there keeps the write lock, and the
    /// next write waits.
    const LEFT_OPEN: Option<&'static str>;

    /// Ends the sessions [`ModelStore::LEFT_OPEN`] counts, returning how many. Run after
    /// a sequence failed: a transaction a dropped request left open keeps its row locks,
    /// and every sequence proptest then tries while shrinking would wait on them forever
    /// instead of reporting. `None` for SQLite, where `LEFT_OPEN` is `None` too.
    const END_LEFT_OPEN: Option<&'static str>;

    /// Runs one statement of the test's own (time moves, resets).
    fn run(pool: &Pool<Self>, sql: String) -> impl Future<Output = ()>;

    /// Records one side effect of a phase, in the phase's transaction.
    fn effect(
        conn: &mut Self::Connection,
        scope: i64,
        tag: &str,
        phase: &str,
        derived: &str,
    ) -> impl Future<Output = sqlx::Result<()>>;
}

macro_rules! model_store {
    ($db:ty, $past:literal, $body_text:literal, $left_open:expr, $end_left_open:expr) => {
        impl ModelStore for $db {
            const PAST: &'static str = $past;
            const BODY_TEXT: &'static str = $body_text;
            const LEFT_OPEN: Option<&'static str> = $left_open;
            const END_LEFT_OPEN: Option<&'static str> = $end_left_open;

            async fn run(pool: &Pool<Self>, sql: String) {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .execute(pool)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }

            async fn effect(
                conn: &mut Self::Connection,
                scope: i64,
                tag: &str,
                phase: &str,
                derived: &str,
            ) -> sqlx::Result<()> {
                sqlx::query(
                    "INSERT INTO effects (scope, tag, phase, derived) VALUES ($1, $2, $3, $4)",
                )
                .bind(scope)
                .bind(tag)
                .bind(phase)
                .bind(derived)
                .execute(conn)
                .await
                .map(drop)
            }
        }
    };
}
model_store!(
    sqlx::Postgres,
    "now() - interval '1 second'",
    "convert_from(response_body, 'UTF8')",
    Some(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'"
    ),
    Some(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
         AND state LIKE 'idle in transaction%'"
    )
);
model_store!(
    sqlx::Sqlite,
    "CAST(unixepoch('subsec') * 1000000 AS INTEGER) - 1000000",
    "CAST(response_body AS TEXT)",
    None,
    None
);

/// Moves `column` (`expires_at`, `locked_until`) of key `k{key}` of `scope` into the
/// past: time moves by rewriting rows, never by sleeping.
pub(crate) async fn move_time<DB: ModelStore>(pool: &Pool<DB>, column: &str, scope: i64, key: u8) {
    DB::run(
        pool,
        format!(
            "UPDATE idem_keys SET {column} = {} WHERE scope = '{scope}' AND idem_key = 'k{key}' \
             AND {column} IS NOT NULL",
            DB::PAST
        ),
    )
    .await;
}

/// One pass of the expiry sweep, as the runtime's background task runs it.
pub(crate) async fn sweep<DB: ModelStore>(pool: &Pool<DB>) -> Result<(), TestCaseError> {
    idem::admin::Expiry::new(pool.clone())
        .sweep_once()
        .await
        .map(drop)
        .map_err(|e| TestCaseError::fail(format!("sweep: {e}")))
}

/// Waits until every connection of both of `env`'s pools is back in its pool, so that
/// what a dropped request or relay set going (its rollback, or a completion idem shields
/// from the drop) has finished; then fails if one of them was handed back inside an
/// open transaction ([`ModelStore::LEFT_OPEN`]).
pub(crate) async fn settle<DB: ModelStore>(env: &Env<DB>) -> Result<(), TestCaseError> {
    for pool in [&env.served_pool, &env.pool] {
        // A bound on the wait, not on the time anything takes: without it a connection
        // that never came back would hang the test rather than fail it.
        let mut waits = 0;
        while pool.num_idle() < pool.size() as usize {
            waits += 1;
            if waits > 20_000 {
                return Err(TestCaseError::fail(format!(
                    "{} of a pool's {} connections never came back after a dropped call",
                    pool.size() as usize - pool.num_idle(),
                    pool.size()
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
    let Some(left_open) = DB::LEFT_OPEN else {
        return Ok(());
    };
    let open = DB::scalar(&env.pool, left_open).await;
    if open > 0 {
        return Err(TestCaseError::fail(format!(
            "a dropped call left {open} connection(s) of a pool inside an open transaction"
        )));
    }
    Ok(())
}

/// The answer key `k{key}` of `scope` holds, if it is completed within its retention: a
/// row whose retention the test ended holds the answer of an operation that is over.
pub(crate) async fn stored_answer<DB: ModelStore>(
    pool: &Pool<DB>,
    scope: i64,
    key: u8,
) -> Option<(u16, Bytes)> {
    let rows = DB::texts(
        pool,
        &format!(
            "SELECT CAST(response_status AS TEXT) || ' ' || {} FROM idem_keys \
             WHERE scope = '{scope}' AND idem_key = 'k{key}' AND state = 'completed' \
               AND expires_at > {}",
            DB::BODY_TEXT,
            DB::PAST
        ),
    )
    .await;
    let row = rows.into_iter().next()?;
    let (status, body) = row.split_once(' ').expect("status and body");
    Some((
        status.parse().expect("a status"),
        Bytes::from(body.to_owned()),
    ))
}

/// Empties what one sequence leaves behind, so the next starts from nothing.
pub(crate) async fn reset<DB: ModelStore>(pool: &Pool<DB>) {
    for table in ["effects", "idem_phases", "idem_keys", "idem_outbox"] {
        DB::run(pool, format!("DELETE FROM {table}")).await;
    }
}

pub(crate) async fn create_effects<DB: ModelStore>(pool: &Pool<DB>) {
    DB::run(
        pool,
        "CREATE TABLE effects (scope BIGINT NOT NULL, tag TEXT NOT NULL, phase TEXT NOT NULL, \
         derived TEXT NOT NULL)"
            .to_owned(),
    )
    .await;
}
