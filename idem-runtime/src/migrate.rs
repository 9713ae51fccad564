//! idem's schema, applied with its own migration history.

use sqlx::Pool;
use sqlx::migrate::{MigrateError, Migrator};

use crate::store::Backend;

/// Name of the table that records which of idem's migrations ran.
pub const MIGRATIONS_TABLE: &str = "_idem_migrations";

/// Creates or upgrades idem's tables (`idem_keys`, `idem_phases`, `idem_outbox`) on
/// PostgreSQL or SQLite, whichever `pool` is for.
///
/// idem records its migrations in `_idem_migrations`, apart from the application's
/// `_sqlx_migrations`, so the application's own `sqlx::migrate!` never sees versions it
/// does not know. Safe to call at every startup: applied migrations are skipped. On
/// PostgreSQL the whole run is one transaction holding a transaction-level advisory lock,
/// so one instance migrates while the others wait, also through a connection pooler in
/// transaction mode such as PgBouncer (the application's own `sqlx::migrate!` takes a
/// session-level lock: run that one over a direct connection). On SQLite (one machine)
/// start one process's migration at a time.
///
/// ```no_run
/// # async fn start() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = sqlx::PgPool::connect("postgres://localhost/shop").await?;
/// idem_runtime::migrate(&pool).await?;
///
/// let pool = sqlx::SqlitePool::connect("sqlite://shop.db?mode=rwc").await?;
/// idem_runtime::migrate(&pool).await?;
/// # Ok(())
/// # }
/// ```
pub async fn migrate<DB: Backend>(pool: &Pool<DB>) -> Result<(), MigrateError> {
    DB::run_migrations(&migrator::<DB>(), pool).await
}

pub(crate) fn migrator<DB: Backend>() -> Migrator {
    let mut migrator = DB::migrator();
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}
