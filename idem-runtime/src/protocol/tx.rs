//! The transaction a handler writes through.

use std::fmt;
use std::ops::{Deref, DerefMut};

use crate::store::Backend;
use crate::store::choice::{ChosenBackend, DefaultBackend};

/// The database transaction idem opened for this request, handed to the handler.
///
/// The key row is already in it; every business write made through it commits
/// together with the stored response, or not at all. It dereferences to the
/// driver's connection (`PgConnection` for PostgreSQL, `SqliteConnection` for SQLite),
/// so queries run with `&mut *tx`, and helpers taking `&mut PgConnection` accept
/// `&mut tx`.
/// It has no `commit` or `rollback`: idem commits when the handler returns a
/// response below 500 and rolls back on a 5xx, a panic or a storage error.
///
/// Write `tx: idem::Tx<'_, sqlx::Postgres>` in an `#[idempotent]` handler; the macro
/// makes the binding mutable (and supplies the lifetime if it is left out). The type
/// parameter names the database, `sqlx::Postgres` or `sqlx::Sqlite`, and the handler's
/// `Idem` must be built on a pool of that database. A bare `idem::Tx` means the one
/// database enabled, and does not compile when both are (see [`DefaultBackend`]).
///
/// ```
/// use idem_runtime::Tx;
///
/// async fn insert_order(tx: &mut Tx<'_, sqlx::Postgres>, item: &str) -> sqlx::Result<i64> {
///     sqlx::query_scalar("INSERT INTO orders (item) VALUES ($1) RETURNING id")
///         .bind(item)
///         .fetch_one(&mut **tx)
///         .await
/// }
/// ```
pub struct Tx<'c, DB: ChosenBackend<'static> = DefaultBackend> {
    conn: &'c mut DB::Connection,
}

impl<'c, DB: Backend> Tx<'c, DB> {
    pub(crate) fn new(conn: &'c mut DB::Connection) -> Self {
        Self { conn }
    }
}

impl<DB: Backend> Deref for Tx<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &Self::Target {
        self.conn
    }
}

impl<DB: Backend> DerefMut for Tx<'_, DB> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.conn
    }
}

impl<DB: Backend> fmt::Debug for Tx<'_, DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tx")
            .field("backend", &<DB as sqlx::Database>::NAME)
            .finish_non_exhaustive()
    }
}
