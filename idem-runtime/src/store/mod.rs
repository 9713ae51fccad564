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
    /// Opens the request's transaction.
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

    // The phased form. Every write of an attempt names its fencing token, and the store
    // refuses it once a takeover has replaced that token.

    /// Inserts the key with a lease for a phased attempt, or reports the row that holds
    /// it. A key whose retention ended (and whose lease is free) is reclaimed as new.
    #[doc(hidden)]
    fn claim_phased(
        conn: &mut Self::Connection,
        request: &ClaimRequest<'_>,
        lease: Duration,
    ) -> impl Future<Output = Result<PhasedClaim, sqlx::Error>>;

    /// Takes over the attempt holding fencing token `seen`, if its lease has expired and
    /// no one else took it over first; returns the new attempt with the phases recorded.
    #[doc(hidden)]
    fn take_over(
        conn: &mut Self::Connection,
        request: &ClaimRequest<'_>,
        seen: i64,
        lease: Duration,
    ) -> impl Future<Output = Result<Option<AttemptRow>, sqlx::Error>>;

    /// Opens a phase's transaction.
    #[doc(hidden)]
    fn begin_phase(
        idem: &Idem<Self>,
    ) -> impl Future<Output = Result<Transaction<'static, Self>, sqlx::Error>>;

    /// Records a phase's output and moves the recovery point, in the phase's transaction,
    /// if the attempt still holds its fencing token; renews the lease.
    #[doc(hidden)]
    fn record_phase(
        conn: &mut Self::Connection,
        attempt: &AttemptRef<'_>,
        phase: &str,
        output: &str,
    ) -> impl Future<Output = Result<PhaseRecord, sqlx::Error>>;

    /// Pushes the lease of a live attempt forward; false when it was taken over.
    #[doc(hidden)]
    fn extend_lease(
        conn: &mut Self::Connection,
        attempt: &AttemptRef<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>>;

    /// Ends the lease of an attempt that failed, so a retry may take over at once.
    #[doc(hidden)]
    fn release_lease(
        conn: &mut Self::Connection,
        attempt: &AttemptRef<'_>,
    ) -> impl Future<Output = Result<(), sqlx::Error>>;

    /// Marks a phased key completed with its response; false when it was taken over.
    #[doc(hidden)]
    fn complete_phased(
        conn: &mut Self::Connection,
        attempt: &AttemptRef<'_>,
        response: &StoredResponse<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>>;

    // The outbox. The relay's calls are `Send` because the relay is handed to
    // `tokio::spawn`.

    /// Writes a message into the outbox in the caller's transaction; returns its id.
    #[doc(hidden)]
    fn enqueue(
        conn: &mut Self::Connection,
        topic: &str,
        payload: &str,
    ) -> impl Future<Output = Result<String, sqlx::Error>>;

    /// Takes up to `limit` due messages and hides them from other relays for `hold`.
    #[doc(hidden)]
    fn take_messages(
        conn: &mut Self::Connection,
        limit: u32,
        hold: Duration,
    ) -> impl Future<Output = Result<Vec<OutboxRow>, sqlx::Error>> + Send;

    /// Marks a message delivered.
    #[doc(hidden)]
    fn mark_delivered(
        conn: &mut Self::Connection,
        id: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Schedules another delivery of a message after `retry_in`.
    #[doc(hidden)]
    fn mark_failed(
        conn: &mut Self::Connection,
        id: &str,
        retry_in: Duration,
        error: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Makes taken messages due again at once (the relay stops before delivering them).
    #[doc(hidden)]
    fn release_messages(
        conn: &mut Self::Connection,
        ids: &[String],
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Deletes up to `limit` messages delivered more than `age` ago.
    #[doc(hidden)]
    fn purge_delivered(
        conn: &mut Self::Connection,
        age: Duration,
        limit: u32,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;
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
    /// How long the claim may wait for another request holding the key.
    pub claim_wait: Duration,
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

/// What a phased claim found.
#[doc(hidden)]
#[derive(Debug)]
pub enum PhasedClaim {
    /// The key is ours, fresh: no phase has run.
    Claimed(AttemptRow),
    /// Another attempt holds or held the key.
    Existing {
        key: ExistingKey,
        /// The holder's lease has run out: a retry of the same request may take over.
        lease_expired: bool,
        /// The holder's fencing token, for [`Backend::take_over`].
        fencing_token: i64,
    },
    /// The holder's row disappeared while we waited; the client should simply retry.
    Vanished,
}

/// The key row as an attempt of the phased form sees it after claiming or taking over.
#[doc(hidden)]
#[derive(Debug)]
pub struct AttemptRow {
    /// Fixed for the life of the key row: derived keys and message ids hash it.
    pub generation: i64,
    /// This attempt's token; every later write names it.
    pub fencing_token: i64,
    /// The last phase committed before this attempt, if any.
    pub recovery_point: Option<String>,
    /// `(phase, output as JSON text)` of every phase committed before this attempt.
    pub recorded: Vec<(String, String)>,
}

/// Names an attempt in the writes it makes.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct AttemptRef<'a> {
    pub scope: &'a str,
    pub key: &'a str,
    pub fencing_token: i64,
    pub lease: Duration,
}

/// How recording a phase went.
#[doc(hidden)]
#[derive(Debug, PartialEq, Eq)]
pub enum PhaseRecord {
    /// Recorded in the phase's transaction; commit it.
    Recorded,
    /// Another attempt took the key over: roll the phase back.
    TakenOver,
    /// The phase's code ended idem's transaction itself; nothing was recorded.
    TransactionEnded,
}

/// An outbox message as the relay takes it.
#[doc(hidden)]
#[derive(Debug)]
pub struct OutboxRow {
    pub id: String,
    pub topic: String,
    pub payload: String,
    pub attempt: i32,
    pub seq: i64,
}
