//! idem's schema: applying its migrations, and comparing what a database holds with
//! what this build ships.

use std::fmt;

use sqlx::Pool;
use sqlx::migrate::{MigrateError, Migrator};

#[cfg(test)]
use crate::store::choice::AnyBackend as DefaultBackend;
use crate::store::{Backend, MIGRATIONS_TABLE, migrator};

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

/// Whether a database holds exactly the idem schema this build ships.
///
/// ```no_run
/// # async fn check(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// match idem_runtime::admin::schema_status(&pool).await? {
///     idem_runtime::admin::SchemaStatus::Current { .. } => {}
///     other => eprintln!("{other}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaStatus {
    /// Every migration of this build is applied, and no other.
    Current {
        /// The latest migration applied.
        version: i64,
    },
    /// No history table (`_idem_migrations`): idem's schema was never applied here.
    Missing,
    /// Some of this build's migrations are not applied yet: run `idem::migrate`.
    Behind {
        /// The latest migration applied, if any.
        version: Option<i64>,
        /// The latest migration of this build.
        expected: i64,
    },
    /// The database has migrations this build does not know: a newer idem migrated it.
    Ahead {
        /// The latest migration applied.
        version: i64,
        /// The latest migration of this build.
        expected: i64,
    },
    /// A migration is recorded as failed part-way.
    Failed {
        /// The failed migration.
        version: i64,
    },
    /// A migration was applied from a different text than this build's (checksums differ).
    Modified {
        /// The migration whose checksum differs.
        version: i64,
    },
}

impl SchemaStatus {
    /// Whether the schema is exactly this build's.
    ///
    /// ```
    /// use idem_runtime::admin::SchemaStatus;
    /// assert!(SchemaStatus::Current { version: 1 }.is_current());
    /// assert!(!SchemaStatus::Missing.is_current());
    /// ```
    pub fn is_current(&self) -> bool {
        matches!(self, Self::Current { .. })
    }
}

impl fmt::Display for SchemaStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Current { version } => write!(f, "idem's schema is current (version {version})"),
            Self::Missing => write!(
                f,
                "idem's schema is not in this database (no `{}` table)",
                MIGRATIONS_TABLE
            ),
            Self::Behind {
                version: Some(version),
                expected,
            } => write!(
                f,
                "idem's schema is at version {version}, older than this idem's {expected}"
            ),
            Self::Behind {
                version: None,
                expected,
            } => write!(
                f,
                "idem's schema has no migration applied; this idem's latest is {expected}"
            ),
            Self::Ahead { version, expected } => write!(
                f,
                "idem's schema is at version {version}, newer than this idem's {expected}"
            ),
            Self::Failed { version } => write!(
                f,
                "idem's migration {version} is recorded as failed part-way in `{}`",
                MIGRATIONS_TABLE
            ),
            Self::Modified { version } => write!(
                f,
                "idem's migration {version} was applied from a different text than this \
                 idem's (checksum mismatch)"
            ),
        }
    }
}

/// Compares idem's migration history in the database (`_idem_migrations`) with the
/// migrations built into this program.
///
/// ```no_run
/// # async fn check(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let status = idem_runtime::admin::schema_status(&pool).await?;
/// if !status.is_current() {
///     return Err(status.to_string().into());
/// }
/// # Ok(())
/// # }
/// ```
pub async fn schema_status<DB: Backend>(pool: &Pool<DB>) -> Result<SchemaStatus, sqlx::Error> {
    let Some(applied) = DB::applied_migrations(pool).await? else {
        return Ok(SchemaStatus::Missing);
    };
    Ok(compare(&migrator::<DB>(), &applied))
}

fn compare(built_in: &Migrator, applied: &[(i64, bool, Vec<u8>)]) -> SchemaStatus {
    let known: Vec<_> = built_in
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .collect();
    let expected = known.iter().map(|m| m.version).max().unwrap_or(0);
    let version = applied.iter().map(|row| row.0).max();
    if let Some((failed, ..)) = applied.iter().find(|row| !row.1) {
        return SchemaStatus::Failed { version: *failed };
    }
    if let Some(version) = version
        && applied
            .iter()
            .any(|(v, ..)| !known.iter().any(|m| m.version == *v))
    {
        return SchemaStatus::Ahead { version, expected };
    }
    for m in &known {
        match applied.iter().find(|row| row.0 == m.version) {
            None => return SchemaStatus::Behind { version, expected },
            Some((v, _, checksum)) if checksum.as_slice() != &*m.checksum => {
                return SchemaStatus::Modified { version: *v };
            }
            Some(_) => {}
        }
    }
    SchemaStatus::Current {
        version: version.unwrap_or(expected),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(rows: &[(i64, bool)]) -> Vec<(i64, bool, Vec<u8>)> {
        let built_in = migrator::<DefaultBackend>();
        rows.iter()
            .map(|&(version, success)| {
                let checksum = built_in
                    .iter()
                    .find(|m| m.version == version)
                    .map_or_else(Vec::new, |m| m.checksum.to_vec());
                (version, success, checksum)
            })
            .collect()
    }

    fn versions() -> Vec<i64> {
        migrator::<DefaultBackend>()
            .iter()
            .map(|m| m.version)
            .collect()
    }

    #[test]
    fn all_built_in_migrations_applied_is_current() {
        let all: Vec<_> = versions().into_iter().map(|v| (v, true)).collect();
        let latest = *versions().last().unwrap();
        assert_eq!(
            compare(&migrator::<DefaultBackend>(), &applied(&all)),
            SchemaStatus::Current { version: latest }
        );
    }

    #[test]
    fn a_missing_migration_is_behind_and_an_unknown_one_ahead() {
        let latest = *versions().last().unwrap();
        assert_eq!(
            compare(&migrator::<DefaultBackend>(), &[]),
            SchemaStatus::Behind {
                version: None,
                expected: latest
            }
        );
        let mut rows: Vec<_> = versions().into_iter().map(|v| (v, true)).collect();
        rows.push((latest + 1, true));
        assert_eq!(
            compare(&migrator::<DefaultBackend>(), &applied(&rows)),
            SchemaStatus::Ahead {
                version: latest + 1,
                expected: latest
            }
        );
    }

    #[test]
    fn failed_and_modified_migrations_are_named() {
        let first = versions()[0];
        assert_eq!(
            compare(&migrator::<DefaultBackend>(), &applied(&[(first, false)])),
            SchemaStatus::Failed { version: first }
        );
        let rows: Vec<_> = versions().into_iter().map(|v| (v, true)).collect();
        let mut rows = applied(&rows);
        rows[0].2 = vec![0; 48];
        assert_eq!(
            compare(&migrator::<DefaultBackend>(), &rows),
            SchemaStatus::Modified { version: first }
        );
    }
}
