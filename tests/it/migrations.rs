//! idem's migrations keep their own history (`_idem_migrations`), so they and the
//! application's `sqlx::migrate!` (default `_sqlx_migrations`) run in any order and any
//! number of times, and several instances may migrate one database at once.

use crate::support;

use idem_testkit::TestDb;
use sqlx::{AssertSqlSafe, PgPool, Pool, Postgres, Sqlite};
use support::TestBackend;
use support::app::{self, Store};

/// `(version, checksum, installed_on as text)` of a history table row.
type HistoryRow = (i64, Vec<u8>, String);

/// What the tests read about migrations; the statements differ only in how a table's
/// existence is asked.
trait Migrations: TestBackend {
    /// The successful rows of a history table, by version.
    async fn history(pool: &Pool<Self>, table: &str) -> Vec<HistoryRow>;

    async fn table_exists(pool: &Pool<Self>, table: &str) -> bool;
}

macro_rules! migrations {
    ($db:ty, $exists:literal) => {
        impl Migrations for $db {
            async fn history(pool: &Pool<Self>, table: &str) -> Vec<HistoryRow> {
                let sql = format!(
                    "SELECT version, checksum, CAST(installed_on AS TEXT) FROM {table} \
                     WHERE success ORDER BY version"
                );
                sqlx::query_as(AssertSqlSafe(sql))
                    .fetch_all(pool)
                    .await
                    .expect("read history")
            }

            async fn table_exists(pool: &Pool<Self>, table: &str) -> bool {
                sqlx::query_scalar($exists)
                    .bind(table)
                    .fetch_one(pool)
                    .await
                    .expect("look the table up")
            }
        }
    };
}

migrations!(Postgres, "SELECT to_regclass($1) IS NOT NULL");
migrations!(
    Sqlite,
    "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = $1)"
);

async fn versions<DB: Migrations>(pool: &Pool<DB>, table: &str) -> Vec<i64> {
    DB::history(pool, table)
        .await
        .into_iter()
        .map(|row| row.0)
        .collect()
}

fn app_versions<DB: Store>() -> Vec<i64> {
    DB::app_migrator().iter().map(|m| m.version).collect()
}

/// Both histories hold exactly their own migrations and both schemas are in place.
async fn assert_both_applied<DB: Migrations>(pool: &Pool<DB>) {
    assert_eq!(
        versions(pool, "_sqlx_migrations").await,
        app_versions::<DB>()
    );
    let idem_versions = versions(pool, idem::admin::MIGRATIONS_TABLE).await;
    assert!(!idem_versions.is_empty(), "idem recorded its migrations");
    assert!(
        idem_versions
            .iter()
            .all(|v| !app_versions::<DB>().contains(v)),
        "idem's history holds none of the application's versions"
    );
    assert!(DB::table_exists(pool, "idem_keys").await);
    assert!(DB::table_exists(pool, "orders").await);
}

async fn migrating_twice_changes_nothing<DB: Migrations>() {
    let (_db, pool) = DB::open().await;

    idem::migrate(&pool).await.expect("first migrate");
    assert_eq!(idem::admin::MIGRATIONS_TABLE, "_idem_migrations");
    let before = DB::history(&pool, "_idem_migrations").await;
    assert!(!before.is_empty());
    assert!(DB::table_exists(&pool, "idem_keys").await);
    assert!(
        !DB::table_exists(&pool, "_sqlx_migrations").await,
        "idem does not touch the application's history table"
    );

    idem::migrate(&pool)
        .await
        .expect("second migrate is a no-op");
    assert_eq!(
        DB::history(&pool, "_idem_migrations").await,
        before,
        "nothing re-applied"
    );
}

async fn the_application_first_then_idem<DB: Migrations>() {
    let (_db, pool) = DB::open().await;
    DB::migrate_app(&pool)
        .await
        .expect("app migrations on a fresh database");
    idem::migrate(&pool).await.expect("idem after the app");
    DB::migrate_app(&pool)
        .await
        .expect("app again: no `version missing`");
    idem::migrate(&pool).await.expect("idem again");
    assert_both_applied(&pool).await;
}

async fn idem_first_then_the_application<DB: Migrations>() {
    let (_db, pool) = DB::open().await;
    idem::migrate(&pool)
        .await
        .expect("idem on a fresh database");
    DB::migrate_app(&pool)
        .await
        .expect("app after idem: no `version missing`");
    idem::migrate(&pool).await.expect("idem again");
    DB::migrate_app(&pool).await.expect("app again");
    assert_both_applied(&pool).await;
}

/// How an instance reaches the database: [`TestDb::pool`] (through
/// `IDEM_TESTKIT_POOLER_URL` when set) or [`TestDb::direct_pool`].
#[derive(Clone, Copy)]
enum Route {
    Pooled,
    Direct,
}

/// Runs `migrate` from eight pools (eight "instances") at once on one fresh database.
async fn eight_at_once<F, Fut>(db: &TestDb, route: Route, migrate: F)
where
    F: Fn(PgPool) -> Fut,
    Fut: Future<Output = Result<(), sqlx::migrate::MigrateError>> + Send + 'static,
{
    let mut pools = Vec::new();
    for _ in 0..8 {
        pools.push(match route {
            Route::Pooled => db.pool(1).await,
            Route::Direct => db.direct_pool(1).await,
        });
    }
    let tasks: Vec<_> = pools
        .iter()
        .map(|pool| tokio::spawn(migrate(pool.clone())))
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        task.await
            .expect("task")
            .unwrap_or_else(|e| panic!("instance {i}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_instances_run_idem_migrate_at_once() {
    let db = TestDb::new().await;
    // Through the pooler when there is one: idem's lock is transaction-level.
    eight_at_once(&db, Route::Pooled, |pool| async move {
        idem::migrate(&pool).await
    })
    .await;
    let pool = db.direct_pool(1).await;
    assert!(!versions(&pool, "_idem_migrations").await.is_empty());
    assert!(Postgres::table_exists(&pool, "idem_keys").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_instances_of_the_example_migrate_at_once() {
    let db = TestDb::new().await;
    // Direct connections: the example's own `sqlx::migrate!` takes sqlx's session-level
    // lock, which a transaction pooler (ha/pgbouncer.sh) cannot keep on one connection.
    eight_at_once(
        &db,
        Route::Direct,
        |pool| async move { app::setup(&pool).await },
    )
    .await;
    assert_both_applied(&db.direct_pool(1).await).await;
}

support::database_tests!(
    migrating_twice_changes_nothing,
    the_application_first_then_idem,
    idem_first_then_the_application,
);
