//! The key store: the seam between the protocol and a database.
//!
//! The protocol (`crate::flow`) speaks to a [`Backend`] only through the calls below,
//! so a second database slots in by implementing them with its own SQL.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::{Pool, Transaction};

use crate::Idem;
use crate::expiry::{KeyRecord, KeyStats};
use crate::fingerprint::Fingerprint;

pub(crate) mod inbox;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

#[cfg(not(any(feature = "postgres", feature = "sqlite")))]
compile_error!("idem needs a database: enable the feature `postgres`, `sqlite` or both");

/// The backend a bare `idem::Tx`, `idem::Idem` or `idem::Phases` names: PostgreSQL when
/// the `postgres` feature is on (the default), else SQLite.
#[cfg(feature = "postgres")]
pub type DefaultBackend = sqlx::Postgres;

/// The backend a bare `idem::Tx`, `idem::Idem` or `idem::Phases` names: PostgreSQL when
/// the `postgres` feature is on (the default), else SQLite.
#[cfg(all(feature = "sqlite", not(feature = "postgres")))]
pub type DefaultBackend = sqlx::Sqlite;

/// A database that can hold idem's keys. Implemented for [`sqlx::Postgres`] (feature
/// `postgres`) and [`sqlx::Sqlite`] (feature `sqlite`).
///
/// The trait is sealed: its methods are idem's storage protocol, not an extension point.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a database idem keeps keys in",
    label = "name `sqlx::Postgres` or `sqlx::Sqlite` here",
    note = "the type parameter of `idem::Tx` and `idem::Phases` names the database of the `Idem` the app registers"
)]
pub trait Backend: sqlx::Database + sealed::Sealed + inbox::InboxBackend {
    /// What opens a request's transaction with `claim_wait` as the longest wait for a
    /// key held by another request; computed once per setting, not per request.
    #[doc(hidden)]
    fn begin_sql(claim_wait: Duration) -> String;

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

    /// Whether the database lets one writer in at a time (SQLite): then a request that
    /// cannot get the write lock may be waiting for any other request, not for its key.
    #[doc(hidden)]
    const ONE_WRITER: bool = false;

    /// Reads the row that holds the key, outside any transaction and without taking a
    /// lock, so a replay or an in-progress answer need not wait for another request's
    /// write. Only a [`ONE_WRITER`](Self::ONE_WRITER) backend needs it; the others claim
    /// at once and answer `None` without a query.
    #[doc(hidden)]
    fn peek(
        idem: &Idem<Self>,
        request: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Option<PeekedKey>, sqlx::Error>> {
        let _ = (idem, request);
        async { Ok(None) }
    }

    /// Whether a failed COMMIT certainly rolled the transaction back: the database
    /// answered that it refused it (a deferred constraint, say). Any other failure (the
    /// connection lost before the answer came) leaves the outcome unknown.
    #[doc(hidden)]
    fn is_definite_rollback(error: &sqlx::Error) -> bool {
        error
            .as_database_error()
            .is_some_and(|e| !matches!(e.kind(), sqlx::error::ErrorKind::Other))
    }

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

    /// Takes up to `limit` due messages for the take `holder` (a token fresh for each
    /// take) and hides them from other relays for `hold`. Counts no attempt.
    #[doc(hidden)]
    fn take_messages(
        conn: &mut Self::Connection,
        limit: u32,
        hold: Duration,
        holder: i64,
    ) -> impl Future<Output = Result<Vec<OutboxRow>, sqlx::Error>> + Send;

    /// Starts a delivery of a message the take `holder` holds: hides it for `hold` from
    /// now and counts the attempt, which it returns (1 the first time). `None` when
    /// another take holds the message now, or it was delivered.
    #[doc(hidden)]
    fn claim_message(
        conn: &mut Self::Connection,
        id: &str,
        holder: i64,
        hold: Duration,
    ) -> impl Future<Output = Result<Option<i32>, sqlx::Error>> + Send;

    /// Hides a message in delivery for `hold` from now, if the take `holder` still holds
    /// it; false when it does not.
    #[doc(hidden)]
    fn renew_message(
        conn: &mut Self::Connection,
        id: &str,
        holder: i64,
        hold: Duration,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Marks a message delivered, if the take `holder` still holds it; false when it does
    /// not (nothing is written then).
    #[doc(hidden)]
    fn mark_delivered(
        conn: &mut Self::Connection,
        id: &str,
        holder: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Schedules another delivery of a message after `retry_in`, if the take `holder`
    /// still holds it; false when it does not (nothing is written then).
    #[doc(hidden)]
    fn mark_failed(
        conn: &mut Self::Connection,
        id: &str,
        holder: i64,
        retry_in: Duration,
        error: &str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Makes messages the take `holder` still holds due again at once (the relay stops
    /// before delivering them); returns how many it gave back.
    #[doc(hidden)]
    fn release_messages(
        conn: &mut Self::Connection,
        ids: &[String],
        holder: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Deletes up to `limit` messages delivered more than `age` ago.
    #[doc(hidden)]
    fn purge_delivered(
        conn: &mut Self::Connection,
        age: Duration,
        limit: u32,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    // Migrations, expiry and the operator's views. `Send`, because the expiry task is
    // handed to `tokio::spawn`.

    /// idem's migrations for this database.
    #[doc(hidden)]
    fn migrator() -> Migrator;

    /// Applies `migrator` (idem's, with its own history table).
    #[doc(hidden)]
    fn run_migrations<'a>(
        migrator: &'a Migrator,
        pool: &'a Pool<Self>,
    ) -> impl Future<Output = Result<(), MigrateError>> + Send + 'a;

    /// The statement (or script) that deletes one batch of up to `batch_size` expired keys.
    #[doc(hidden)]
    fn batch_statement(batch_size: u32) -> String;

    /// Runs one batch built by [`batch_statement`](Self::batch_statement); returns the
    /// rows it deleted.
    #[doc(hidden)]
    fn delete_batch(
        pool: &Pool<Self>,
        statement: &str,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// The database's plan for one batch, one line per element.
    #[doc(hidden)]
    fn explain_batch(
        pool: &Pool<Self>,
        batch_size: u32,
    ) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send;

    /// Rows a sweep started now would delete.
    #[doc(hidden)]
    fn count_deletable(pool: &Pool<Self>) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// `(version, success, checksum)` of idem's applied migrations; `None` without a
    /// history table.
    #[doc(hidden)]
    fn applied_migrations(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<Option<Vec<AppliedMigration>>, sqlx::Error>> + Send;

    /// Counts by state and age, the oldest key in progress, sizes on disk.
    #[doc(hidden)]
    fn key_stats(pool: &Pool<Self>) -> impl Future<Output = Result<KeyStats, sqlx::Error>> + Send;

    /// One key row with at most `preview` bytes of its body.
    #[doc(hidden)]
    fn inspect_key(
        pool: &Pool<Self>,
        scope: &str,
        key: &str,
        preview: usize,
    ) -> impl Future<Output = Result<Option<KeyRecord>, sqlx::Error>> + Send;

    /// How many keys are in progress past their retention with no live lease, and the
    /// `created_at` (microseconds) of the oldest.
    #[doc(hidden)]
    fn count_stranded(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<(u64, Option<i64>), sqlx::Error>> + Send;

    /// Up to `limit` keys in progress past their retention with no live lease, oldest
    /// first.
    #[doc(hidden)]
    fn stranded_keys(
        pool: &Pool<Self>,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<StrandedRow>, sqlx::Error>> + Send;

    /// `(phase, output as JSON text, recorded at in microseconds)` of a key's recorded
    /// phases, in the order they committed.
    #[doc(hidden)]
    fn recorded_phases(
        pool: &Pool<Self>,
        scope: &str,
        key: &str,
    ) -> impl Future<Output = Result<Vec<(String, String, i64)>, sqlx::Error>> + Send;

    /// The generation of a key's row, if it has one.
    #[doc(hidden)]
    fn generation_of(
        pool: &Pool<Self>,
        scope: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<i64>, sqlx::Error>> + Send;

    /// Completes a `started` key of `generation` whose lease is free with `response`
    /// (sealed to that generation), fencing out any attempt, and keeps it for `keep`;
    /// says why not otherwise.
    #[doc(hidden)]
    fn resolve_key(
        pool: &Pool<Self>,
        scope: &str,
        key: &str,
        generation: i64,
        response: &StoredResponse<'_>,
        keep: Duration,
    ) -> impl Future<Output = Result<Resolved, sqlx::Error>> + Send;
}

/// A stranded key as both stores select it: scope, key, method, path, recovery point,
/// created / expires / locked-until in microseconds since the epoch, generation.
#[doc(hidden)]
#[derive(Debug, sqlx::FromRow)]
pub struct StrandedRow {
    pub scope: String,
    pub idem_key: String,
    pub method: String,
    pub path: String,
    pub recovery_point: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub locked_until: Option<i64>,
    pub generation: i64,
}

/// What [`Backend::resolve_key`] did.
#[doc(hidden)]
#[derive(Debug, PartialEq, Eq)]
pub enum Resolved {
    /// Completed with the given answer.
    Done,
    /// No such key.
    NotFound,
    /// The key has its final answer already.
    AlreadyCompleted,
    /// An attempt holds the key's lease: it is being worked on.
    InLease,
}

mod sealed {
    pub trait Sealed {}
    #[cfg(feature = "postgres")]
    impl Sealed for sqlx::Postgres {}
    #[cfg(feature = "sqlite")]
    impl Sealed for sqlx::Sqlite {}
}

/// `(version, success, checksum)` of a row of idem's migration history.
pub(crate) type AppliedMigration = (i64, bool, Vec<u8>);

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
    /// Which life of the key the row is: a new one begins whenever the key is claimed
    /// anew (after its row was deleted, or reclaimed after its retention). The stored
    /// response is sealed to it.
    pub generation: i64,
}

/// `(response_status, response_headers, response_body)` of a key row, as both stores read
/// them.
pub(crate) type StoredColumns = (Option<i16>, Option<Vec<u8>>, Option<Vec<u8>>);

/// A key row as [`Backend::peek`] read it.
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
    pub seq: i64,
}

/// A key row as both stores' `inspect_key` select it: state, recovery point,
/// fingerprint, method, path, created/expires/locked-until in microseconds since the
/// epoch, status, header block, body length and the body's first bytes.
pub(crate) type InspectRow = (
    String,
    String,
    Vec<u8>,
    String,
    String,
    i64,
    i64,
    Option<i64>,
    Option<i16>,
    Option<Vec<u8>>,
    Option<i64>,
    Option<Vec<u8>>,
);

/// The operator's view of an [`InspectRow`] of `key` in `scope`.
pub(crate) fn key_record(scope: &str, key: &str, row: InspectRow) -> KeyRecord {
    let (
        state,
        recovery_point,
        request_hash,
        method,
        path,
        created,
        expires,
        locked,
        status,
        headers,
        body_len,
        body_head,
    ) = row;
    KeyRecord {
        scope: scope.to_owned(),
        key: key.to_owned(),
        state,
        recovery_point,
        fingerprint: request_hash,
        method,
        path,
        created_at: from_micros(created),
        expires_at: from_micros(expires),
        locked_until: locked.map(from_micros),
        response_status: status.and_then(|s| u16::try_from(s).ok()),
        response_headers: headers
            .as_deref()
            .map(split_header_lines)
            .unwrap_or_default(),
        response_body_len: body_len.map(count),
        response_body_head: body_head.unwrap_or_default(),
    }
}

/// The stored header block is HTTP/1 lines, `name: value\r\n` (see the key table's
/// migration); values stay bytes, as HTTP allows any octet in them.
pub(crate) fn split_header_lines(block: &[u8]) -> Vec<(String, Vec<u8>)> {
    block
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|&b| b == b':')?;
            let (name, value) = line.split_at(colon);
            let value = value[1..].trim_ascii_start();
            Some((String::from_utf8_lossy(name).into_owned(), value.to_vec()))
        })
        .collect()
}

/// `(scope, key, recovery point, created at, locked until)` of a key in progress, times in
/// microseconds since the epoch, as both stores' `key_stats` select it.
pub(crate) type InProgressRow = (String, String, String, i64, Option<i64>);

pub(crate) fn in_progress_key(row: InProgressRow) -> crate::InProgressKey {
    let (scope, key, recovery_point, created, locked) = row;
    crate::InProgressKey {
        scope,
        key,
        recovery_point,
        created_at: from_micros(created),
        locked_until: locked.map(from_micros),
    }
}

/// Counts and sizes come back as 64-bit integers; none of them is negative.
pub(crate) fn count(value: i64) -> u64 {
    value.unsigned_abs()
}

pub(crate) fn from_micros(micros: i64) -> SystemTime {
    let offset = Duration::from_micros(micros.unsigned_abs());
    if micros >= 0 {
        UNIX_EPOCH + offset
    } else {
        UNIX_EPOCH - offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_split_into_names_and_byte_values() {
        let block = b"location: /orders/7\r\ncontent-type: application/json\r\nx-raw: \xff\r\n";
        assert_eq!(
            split_header_lines(block),
            [
                ("location".to_owned(), b"/orders/7".to_vec()),
                ("content-type".to_owned(), b"application/json".to_vec()),
                ("x-raw".to_owned(), b"\xff".to_vec()),
            ]
        );
        assert!(split_header_lines(b"").is_empty());
    }
}
