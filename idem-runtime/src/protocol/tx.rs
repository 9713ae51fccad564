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
/// Behind axum's `IdempotencyLayer` (feature `axum`) a plain handler takes it as an
/// extractor, `tx: idem::Tx<'static, sqlx::Postgres>`: the layer lends it the transaction
/// for the call, and the same helpers taking `&mut Tx` or the connection work in both.
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
    conn: Conn<'c, DB>,
}

/// How the handler holds the transaction.
enum Conn<'c, DB: ChosenBackend<'static>> {
    /// Borrowed for the handler's call: the macro's forms.
    Borrowed(&'c mut DB::Connection),
    /// Lent through a [`LentTx`] to a handler that is a service of its own (axum's
    /// `IdempotencyLayer`); always `Some` while lent.
    #[cfg(feature = "axum")]
    Lent(tokio::sync::OwnedMutexGuard<Option<sqlx::Transaction<'static, DB>>>),
}

impl<'c, DB: Backend> Tx<'c, DB> {
    pub(crate) fn new(conn: &'c mut DB::Connection) -> Self {
        Self {
            conn: Conn::Borrowed(conn),
        }
    }
}

impl<DB: Backend> Deref for Tx<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &Self::Target {
        match &self.conn {
            Conn::Borrowed(conn) => conn,
            #[cfg(feature = "axum")]
            Conn::Lent(guard) => guard.as_ref().expect(LENT),
        }
    }
}

impl<DB: Backend> DerefMut for Tx<'_, DB> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match &mut self.conn {
            Conn::Borrowed(conn) => conn,
            #[cfg(feature = "axum")]
            Conn::Lent(guard) => guard.as_mut().expect(LENT),
        }
    }
}

#[cfg(feature = "axum")]
const LENT: &str = "a slot holds its transaction until the lender takes it back, which it \
                    cannot while a Tx holds the slot's lock";

/// A request's transaction lent to a handler that runs as a service of its own, behind
/// axum's `IdempotencyLayer`: the layer's core puts it in, the handler's [`Tx`] locks it
/// for as long as it lives, and the core takes it back to record the answer and commit.
#[cfg(feature = "axum")]
pub(crate) struct LentTx<DB: Backend>(
    std::sync::Arc<tokio::sync::Mutex<Option<sqlx::Transaction<'static, DB>>>>,
);

#[cfg(feature = "axum")]
impl<DB: Backend> Clone for LentTx<DB> {
    fn clone(&self) -> Self {
        Self(std::sync::Arc::clone(&self.0))
    }
}

#[cfg(feature = "axum")]
impl<DB: Backend> LentTx<DB> {
    pub(crate) fn new(txn: sqlx::Transaction<'static, DB>) -> Self {
        Self(std::sync::Arc::new(tokio::sync::Mutex::new(Some(txn))))
    }

    /// The transaction as the handler's `Tx`; `None` when a `Tx` of it is alive already
    /// or it was taken back.
    pub(crate) fn lend<'c>(&self) -> Option<Tx<'c, DB>> {
        let guard = std::sync::Arc::clone(&self.0).try_lock_owned().ok()?;
        guard.is_some().then_some(Tx {
            conn: Conn::Lent(guard),
        })
    }

    /// The transaction back from the handler; `None` while something still holds a `Tx`
    /// of it.
    pub(crate) fn take_back(&self) -> Option<sqlx::Transaction<'static, DB>> {
        self.0.try_lock().ok()?.take()
    }
}

impl<DB: Backend> fmt::Debug for Tx<'_, DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tx")
            .field("backend", &<DB as sqlx::Database>::NAME)
            .finish_non_exhaustive()
    }
}
