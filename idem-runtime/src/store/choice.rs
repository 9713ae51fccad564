//! Which database a bare `idem::Tx`, `Phases`, `Idem`, `Relay` or `Expiry` names: the one
//! enabled, or, with both `postgres` and `sqlite` on, none, which is a compile error that
//! says to name one. Read by the types' declarations and the macro's output, never by
//! the store's SQL.

use std::mem::ManuallyDrop;
use std::ops::Deref;
#[cfg(all(feature = "postgres", feature = "sqlite"))]
use std::time::Duration;

use sqlx::Pool;
#[cfg(all(feature = "postgres", feature = "sqlite"))]
use sqlx::Transaction;

use super::Backend;
#[cfg(all(feature = "postgres", feature = "sqlite"))]
use super::inbox::InboxStore;
#[cfg(all(feature = "postgres", feature = "sqlite"))]
use super::sealed::Sealed;
#[cfg(all(feature = "postgres", feature = "sqlite"))]
use super::{
    Claim, ClaimRequest, Completion, MaintenanceStore, OutboxStore, PhaseStore, StoredResponse,
};

/// The backend a bare `idem::Tx`, `idem::Phases`, `idem::Idem`, `Relay` or `Expiry`
/// names: the one database enabled. With both `postgres` and `sqlite` on it is
/// [`BothBackendsEnabled`], which is no database, so a bare name does not compile and
/// must name its database (`idem::Tx<'_, sqlx::Sqlite>`).
///
/// A bare name never picks one of two enabled databases: features are unified across
/// the dependency graph, so a crate that turns on `idem/postgres` in a SQLite
/// application would otherwise change what the application's `Tx` means.
#[cfg(all(feature = "postgres", not(feature = "sqlite")))]
pub type DefaultBackend = sqlx::Postgres;

/// The backend a bare `idem::Tx`, `idem::Phases`, `idem::Idem`, `Relay` or `Expiry`
/// names: the one database enabled. With both `postgres` and `sqlite` on it is
/// [`BothBackendsEnabled`], which is no database, so a bare name does not compile and
/// must name its database (`idem::Tx<'_, sqlx::Sqlite>`).
#[cfg(all(feature = "sqlite", not(feature = "postgres")))]
pub type DefaultBackend = sqlx::Sqlite;

/// The backend a bare `idem::Tx`, `idem::Phases`, `idem::Idem`, `Relay` or `Expiry`
/// names: with both `postgres` and `sqlite` on, [`BothBackendsEnabled`], which is no
/// database, so a bare name does not compile and must name its database
/// (`idem::Tx<'_, sqlx::Sqlite>` or `idem::Tx<'_, sqlx::Postgres>`).
///
/// A bare name never picks one of two enabled databases: features are unified across
/// the dependency graph, so a crate that turns on `idem/postgres` in a SQLite
/// application would otherwise change what the application's `Tx` means.
#[cfg(all(feature = "postgres", feature = "sqlite"))]
pub type DefaultBackend = BothBackendsEnabled;

// What `#[idempotent]` writes for a transaction or phases parameter that names no
// database, and for a handler with neither: the macro hands over both answers, the
// default backend and the compile error that says to name one, and this crate, which
// alone knows its features, keeps one. The error's tokens are the macro's, spanned at the
// user's type (or the attribute), and pass through here untouched: so rustc reports it
// there, with no note about this macro.
#[cfg(not(all(feature = "postgres", feature = "sqlite")))]
#[doc(hidden)]
#[macro_export]
macro_rules! __idem_unnamed_backend {
    ({ $($one:tt)* } { $($both:tt)* }) => { $($one)* };
}

#[cfg(all(feature = "postgres", feature = "sqlite"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __idem_unnamed_backend {
    ({ $($one:tt)* } { $($both:tt)* }) => { $($both)* };
}

/// A database this build has, for what holds for every backend but must name one: the
/// constants `Expiry::DEFAULT_*` (so they need no type annotation) and unit tests.
#[cfg(feature = "postgres")]
pub(crate) type AnyBackend = sqlx::Postgres;

/// A database this build has, for what holds for every backend but must name one.
#[cfg(all(feature = "sqlite", not(feature = "postgres")))]
pub(crate) type AnyBackend = sqlx::Sqlite;

/// What [`DefaultBackend`] is with both `postgres` and `sqlite` enabled: no database. A
/// type that names it (a bare `idem::Tx`) fails to compile with a message that says to
/// name the database.
///
/// It has no values, and its [`Backend`] implementation requires
/// [`NameTheDatabase`], which nothing implements: it exists so that the error names
/// the cause instead of "not a database".
#[cfg(all(feature = "postgres", feature = "sqlite"))]
pub struct BothBackendsEnabled<T = ()>(std::convert::Infallible, std::marker::PhantomData<T>);

#[cfg(all(feature = "postgres", feature = "sqlite"))]
impl<T> std::fmt::Debug for BothBackendsEnabled<T> {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {}
    }
}

/// The requirement that makes a bare `idem::Tx` fail when both databases are enabled:
/// [`BothBackendsEnabled`] is a [`Backend`] only where it implements this trait, and
/// nothing does (its supertraits are sealed). Its message is the error the user sees.
#[cfg(all(feature = "postgres", feature = "sqlite"))]
#[diagnostic::on_unimplemented(
    message = "both `postgres` and `sqlite` are enabled, so a bare `idem::Tx` (or `Phases`, `Idem`, `Relay`, `Expiry`) names no database: write `idem::Tx<'_, sqlx::Sqlite>` (or `sqlx::Postgres`), or enable only one",
    label = "names no database",
    note = "a bare name would mean whichever database features happen to be enabled across the dependency graph, so idem makes it name one"
)]
pub trait NameTheDatabase:
    sqlx::Database + Sealed + PhaseStore + OutboxStore + MaintenanceStore + InboxStore
{
}

/// The bound of the types that default to [`DefaultBackend`] (`Tx`, `Phases`, `Idem`,
/// `Relay`, `Expiry`, `Lease`): every [`Backend`] implements it.
///
/// The lifetime is there for the compiler alone: a bound that names a lifetime is not
/// checked against the type's default where the type is declared, only where a bare
/// name is used, which is where the error about [`BothBackendsEnabled`] belongs.
pub trait ChosenBackend<'a>: Backend {}

impl<DB: Backend> ChosenBackend<'_> for DB {}

/// The pool of a type that defaults to [`DefaultBackend`] and is passed by value (`Relay`),
/// held so that a bare name with both databases on fails with [`NameTheDatabase`]'s
/// error alone.
///
/// A `Pool<DB>` field adds a second error at the binding of a bare `Relay` taken by value,
/// "`BothBackendsEnabled: Database` is not satisfied": the drop check of the binding
/// looks into the pool's fields, which name the database's connection type. It does not
/// look behind `ManuallyDrop`, and [`Drop`] here still drops the pool, by value. The
/// `Option` is what lets it do so without `unsafe`: it is `None` only inside `drop`.
pub(crate) struct HeldPool<DB: ChosenBackend<'static>>(ManuallyDrop<Option<Pool<DB>>>);

impl<DB: ChosenBackend<'static>> HeldPool<DB> {
    pub(crate) fn new(pool: Pool<DB>) -> Self {
        Self(ManuallyDrop::new(Some(pool)))
    }
}

impl<DB: ChosenBackend<'static>> Deref for HeldPool<DB> {
    type Target = Pool<DB>;

    fn deref(&self) -> &Pool<DB> {
        self.0
            .as_ref()
            .expect("a held pool is taken only by its drop")
    }
}

impl<DB: ChosenBackend<'static>> Drop for HeldPool<DB> {
    fn drop(&mut self) {
        drop(self.0.take());
    }
}

// No method here runs: `BothBackendsEnabled` has no values and `NameTheDatabase` no
// implementations, so no caller can name this implementation. It exists so that the
// failing requirement, and so the message, is `NameTheDatabase`'s.
#[cfg(all(feature = "postgres", feature = "sqlite"))]
impl<T> Backend for BothBackendsEnabled<T>
where
    Self: NameTheDatabase,
{
    type Opening = ();

    fn opening(_: Duration) -> Self::Opening {}

    async fn begin(
        _: sqlx::pool::PoolConnection<Self>,
        (): &(),
    ) -> Result<Transaction<'static, Self>, sqlx::Error> {
        unreachable!("BothBackendsEnabled is no database")
    }

    async fn claim(_: &mut Self::Connection, _: &ClaimRequest<'_>) -> Result<Claim, sqlx::Error> {
        unreachable!("BothBackendsEnabled is no database")
    }

    async fn complete(
        _: &mut Self::Connection,
        _: &ClaimRequest<'_>,
        _: &StoredResponse<'_>,
    ) -> Result<Completion, sqlx::Error> {
        unreachable!("BothBackendsEnabled is no database")
    }

    async fn read_key(
        _: &mut Self::Connection,
        _: &ClaimRequest<'_>,
    ) -> Result<Option<super::PeekedKey>, sqlx::Error> {
        unreachable!("BothBackendsEnabled is no database")
    }

    fn is_lock_timeout(_: &sqlx::Error) -> bool {
        unreachable!("BothBackendsEnabled is no database")
    }

    fn is_aborted_transaction(_: &sqlx::Error) -> bool {
        unreachable!("BothBackendsEnabled is no database")
    }
}
