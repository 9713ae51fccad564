//! What the protocol hands the store and what the store answers: the claim request, the
//! key rows it reports, the phased form's attempts, the outbox's messages.

use std::time::Duration;

use bytes::Bytes;

use super::stored_bytes::StoredBytes;

/// A request's fingerprint as the store keeps it: the SHA-256 digest of the request.
pub(crate) type Digest = [u8; 32];

/// Everything a claim writes about a request.
#[doc(hidden)]
#[derive(Debug)]
pub struct ClaimRequest<'a> {
    pub scope: &'a str,
    pub key: &'a str,
    pub fingerprint: Digest,
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
    Claimed {
        /// The life of the key row this claim began (see [`ExistingKey::generation`]).
        generation: i64,
    },
    /// Another request already holds the key.
    Existing(ExistingKey),
    /// The holder's transaction ended while we waited and its row is gone again;
    /// the client should simply retry.
    Vanished,
}

/// Which step of [`Backend::begin_claim`](super::Backend::begin_claim) failed: a lock
/// timeout means "the database's write lock is held" in the first, "the key's holder
/// keeps it" in the second.
#[doc(hidden)]
#[derive(Debug)]
pub enum ClaimFailed {
    /// Opening the transaction failed; no transaction is open.
    Begin(sqlx::Error),
    /// The claim failed in the open transaction, which is rolled back.
    Claim(sqlx::Error),
}

/// A key row written by an earlier request.
#[doc(hidden)]
#[derive(Debug)]
pub struct ExistingKey {
    pub fingerprint: Option<Digest>,
    pub method: String,
    pub path: String,
    pub completed: bool,
    pub response_status: Option<i16>,
    pub response_headers: Option<Bytes>,
    /// On PostgreSQL, a share of the buffer the row was read into: a replay sends it as
    /// it is.
    pub response_body: Option<Bytes>,
    /// Which life of the key the row is: a new one begins whenever the key is claimed
    /// anew (after its row was deleted, or reclaimed after its retention). The stored
    /// response is sealed to it.
    pub generation: i64,
}

/// The columns of a key row the protocol reads: by name, as SQLite's statements select
/// them (flattened into each query's own row type), or from the record PostgreSQL's
/// claims return them in (`store::postgres::existing_key`). The request's columns are
/// `None` only for a row the claim has just inserted ([`claimed`](Self::claimed)).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct KeyColumns {
    pub(crate) request_hash: Option<Vec<u8>>,
    pub(crate) method: Option<String>,
    pub(crate) path: Option<String>,
    pub(crate) state: Option<String>,
    pub(crate) response_status: Option<i16>,
    pub(crate) response_headers: Option<StoredBytes>,
    pub(crate) response_body: Option<StoredBytes>,
    pub(crate) generation: i64,
}

impl KeyColumns {
    /// A row this request has just inserted: only its generation is of interest.
    #[cfg(feature = "postgres")]
    pub(crate) fn claimed(generation: i64) -> Self {
        Self {
            request_hash: None,
            method: None,
            path: None,
            state: None,
            response_status: None,
            response_headers: None,
            response_body: None,
            generation,
        }
    }

    /// The size of the stored response's header block and body, as read (PostgreSQL
    /// gives its connection's buffers back after a large one).
    #[cfg(feature = "postgres")]
    pub(crate) fn stored_len(&self) -> usize {
        [&self.response_headers, &self.response_body]
            .iter()
            .map(|value| value.as_ref().map_or(0, |b| b.0.len()))
            .sum()
    }

    /// The row as the protocol compares and replays it.
    pub(crate) fn into_existing(self) -> ExistingKey {
        ExistingKey {
            fingerprint: self.request_hash.as_deref().and_then(|h| h.try_into().ok()),
            method: self.method.unwrap_or_default(),
            path: self.path.unwrap_or_default(),
            completed: self.state.as_deref() == Some("completed"),
            response_status: self.response_status,
            response_headers: self.response_headers.map(|b| b.0),
            response_body: self.response_body.map(|b| b.0),
            generation: self.generation,
        }
    }
}

/// A key row as [`Backend::peek`](super::Backend::peek) read it.
#[doc(hidden)]
#[derive(Debug)]
pub struct PeekedKey {
    pub key: ExistingKey,
    /// Its retention has ended: a new request may reclaim it (under the write lock).
    pub expired: bool,
    /// No phased attempt holds its lease (always true in the single-transaction form).
    pub lease_free: bool,
}

/// A response as stored for replay.
#[doc(hidden)]
#[derive(Debug)]
pub struct StoredResponse<'a> {
    pub status: u16,
    pub headers: &'a [u8],
    pub body: &'a [u8],
}

/// A response to store that the store may keep beyond its caller's future: what a
/// completion that must not stop halfway (`Backend::complete_shielded`) takes. The body
/// is shared, not copied.
#[doc(hidden)]
#[derive(Debug)]
pub struct OwnedResponse {
    pub status: u16,
    pub headers: Vec<u8>,
    pub body: Bytes,
}

impl OwnedResponse {
    /// Lends the response to a statement.
    pub fn stored(&self) -> StoredResponse<'_> {
        StoredResponse {
            status: self.status,
            headers: &self.headers,
            body: &self.body,
        }
    }
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
        /// The holder's fencing token, for [`PhaseStore::take_over`](super::PhaseStore::take_over).
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
#[derive(Debug, sqlx::FromRow)]
pub struct OutboxRow {
    pub id: String,
    pub topic: String,
    pub payload: String,
    pub seq: i64,
}
