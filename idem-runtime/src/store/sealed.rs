//! Which databases may be a [`Backend`](super::Backend): the ones idem has a store for.
//! A leaf of its own, so that the capability traits beside `mod.rs` (the inbox's) can be
//! sealed without importing the file that gathers them.

/// Implemented for each database idem has a store for, and nothing else.
pub trait Sealed {}
#[cfg(feature = "postgres")]
impl Sealed for sqlx::Postgres {}
#[cfg(feature = "sqlite")]
impl Sealed for sqlx::Sqlite {}
