//! The harness's view of the key store: the test-only calls of `TestingStore` and the
//! expiry sweep, on whichever database the endpoint's pool is.

use std::any::Any;

use sqlx::Pool;

use crate::maintenance::{Expiry, SweepReport};
use crate::store::{Backend, TestKeyRow, TestingStore};

/// The pool an endpoint's checks read the key table through.
///
/// An enum rather than a type parameter of [`Endpoint`](super::Endpoint), so that an
/// endpoint is built before its pool is named and one harness type serves both databases.
#[derive(Clone, Debug)]
pub(super) enum KeyStore {
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
}

/// One call on whichever database the store is.
macro_rules! on_store {
    ($store:expr, $pool:ident, $db:ident => $call:expr) => {
        match $store {
            #[cfg(feature = "postgres")]
            KeyStore::Postgres($pool) => {
                type $db = sqlx::Postgres;
                $call
            }
            #[cfg(feature = "sqlite")]
            KeyStore::Sqlite($pool) => {
                type $db = sqlx::Sqlite;
                $call
            }
        }
    };
}

impl KeyStore {
    /// The store of `pool`. `Backend` is sealed to PostgreSQL and SQLite, so the pool is
    /// one of the two.
    pub(super) fn of<DB: Backend>(pool: &Pool<DB>) -> Self {
        let any: &dyn Any = pool;
        #[cfg(feature = "postgres")]
        if let Some(pool) = any.downcast_ref::<sqlx::PgPool>() {
            return Self::Postgres(pool.clone());
        }
        #[cfg(feature = "sqlite")]
        if let Some(pool) = any.downcast_ref::<sqlx::SqlitePool>() {
            return Self::Sqlite(pool.clone());
        }
        unreachable!("idem keeps keys in PostgreSQL or SQLite only")
    }

    pub(super) async fn key_row(&self, key: &str) -> Result<Option<TestKeyRow>, sqlx::Error> {
        on_store!(self, pool, DB => DB::test_key_row(pool, key).await)
    }

    pub(super) async fn end_lease(&self, key: &str) -> Result<u64, sqlx::Error> {
        on_store!(self, pool, DB => DB::test_end_lease(pool, key).await)
    }

    pub(super) async fn age_key(&self, key: &str) -> Result<u64, sqlx::Error> {
        on_store!(self, pool, DB => DB::test_age_key(pool, key).await)
    }

    pub(super) async fn expiry_index(&self) -> Result<bool, sqlx::Error> {
        on_store!(self, pool, DB => DB::test_expiry_index(pool).await)
    }

    /// One sweep of the application's kind: [`Expiry::sweep_once`] with its defaults.
    pub(super) async fn sweep(&self) -> Result<SweepReport, String> {
        on_store!(self, pool, DB => Expiry::<DB>::new(pool.clone())
            .sweep_once()
            .await
            .map_err(|error| error.to_string()))
    }
}
