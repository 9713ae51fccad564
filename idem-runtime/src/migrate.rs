//! idem's schema, applied with its own migration history.

use sqlx::PgPool;
use sqlx::migrate::{MigrateError, Migrator};

/// Name of the table that records which of idem's migrations ran.
pub const MIGRATIONS_TABLE: &str = "_idem_migrations";

/// Creates or upgrades idem's tables (`idem_keys`).
///
/// idem records its migrations in `_idem_migrations`, apart from the application's
/// `_sqlx_migrations`, so the application's own `sqlx::migrate!` never sees versions it
/// does not know. Safe to call from every instance at startup: a PostgreSQL advisory
/// lock lets one instance migrate while the others wait, and applied migrations are
/// skipped.
///
/// ```no_run
/// # async fn start() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = sqlx::PgPool::connect("postgres://localhost/shop").await?;
/// idem_runtime::migrate(&pool).await?;
/// # Ok(())
/// # }
/// ```
pub async fn migrate(pool: &PgPool) -> Result<(), MigrateError> {
    migrator().run(pool).await
}

pub(crate) fn migrator() -> Migrator {
    let mut migrator = sqlx::migrate!("migrations/postgres");
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}
