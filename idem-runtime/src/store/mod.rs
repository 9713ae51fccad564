//! The key store: the seam between the protocol and a database.
//!
//! The protocol (`crate::flow`) speaks to a [`Backend`] only through the calls below,
//! so a second database slots in by implementing them with its own SQL.

use std::future::Future;
use std::time::Duration;

use sqlx::Transaction;

use crate::Idem;
use crate::fingerprint::Fingerprint;

pub(crate) mod postgres;

/// A database that can hold idem's keys. Implemented for [`sqlx::Postgres`].
///
/// The trait is sealed: its methods are idem's storage protocol, not an extension point.
pub trait Backend: sqlx::Database + sealed::Sealed {
    /// Opens the request's transaction, with the claim's lock timeout in force.
    #[doc(hidden)]
    fn begin(
        idem: &Idem<Self>,
    ) -> impl Future<Output = Result<Transaction<'static, Self>, sqlx::Error>>;

    /// Inserts the key row, or reports the row that already holds the key.
    ///
    /// On [`Claim::Claimed`] the claim's lock timeout is lifted again, so the handler's
    /// own statements run with the application's setting.
    #[doc(hidden)]
    fn claim(
        conn: &mut Self::Connection,
        request: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Claim, sqlx::Error>>;

    /// Marks the claimed key completed with its response, in the same transaction.
    #[doc(hidden)]
    fn complete(
        conn: &mut Self::Connection,
        request: &ClaimRequest<'_>,
        response: &StoredResponse<'_>,
    ) -> impl Future<Output = Result<Completion, sqlx::Error>>;

    /// Whether an error means "another request holds this key's lock".
    #[doc(hidden)]
    fn is_lock_timeout(error: &sqlx::Error) -> bool;

    /// Whether an error means "an earlier statement failed; the transaction is aborted".
    #[doc(hidden)]
    fn is_aborted_transaction(error: &sqlx::Error) -> bool;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for sqlx::Postgres {}
}

/// Everything a claim writes about a request.
#[doc(hidden)]
#[derive(Debug)]
pub struct ClaimRequest<'a> {
    pub scope: &'a str,
    pub key: &'a str,
    pub fingerprint: Fingerprint,
    pub method: &'a str,
    pub path: &'a str,
    pub retention: Duration,
}

/// What a claim found.
#[doc(hidden)]
#[derive(Debug)]
pub enum Claim {
    /// The key is ours: run the handler.
    Claimed,
    /// Another request already holds the key.
    Existing(ExistingKey),
    /// The holder's transaction ended while we waited and its row is gone again;
    /// the client should simply retry.
    Vanished,
}

/// A key row written by an earlier request.
#[doc(hidden)]
#[derive(Debug)]
pub struct ExistingKey {
    pub fingerprint: Option<Fingerprint>,
    pub method: String,
    pub path: String,
    pub completed: bool,
    pub response_status: Option<i16>,
    pub response_headers: Option<Vec<u8>>,
    pub response_body: Option<Vec<u8>>,
}

/// A response as stored for replay.
#[doc(hidden)]
#[derive(Debug)]
pub struct StoredResponse<'a> {
    pub status: u16,
    pub headers: &'a [u8],
    pub body: &'a [u8],
}

/// How completing a key went.
#[doc(hidden)]
#[derive(Debug, PartialEq, Eq)]
pub enum Completion {
    /// Recorded in the request's transaction.
    Recorded,
    /// The key row is gone: the handler rolled the transaction back itself.
    RowGone,
    /// Recorded, but outside idem's transaction: the handler committed it itself.
    OutsideTransaction,
}
