//! The key store: the seam between the protocol and a database.
//!
//! The protocol speaks to a database only through the capability traits below, each
//! implemented by a database in the file that holds that part of its SQL:
//!
//! - [`Backend`]: opening a request's transaction, the single-transaction claim and
//!   completion, and what the database's errors mean (`<db>/mod.rs`);
//! - [`PhaseStore`]: the phased form's claim, takeover, phases and lease (`<db>/phased.rs`);
//! - [`OutboxStore`]: the outbox and the relay's takes (`<db>/outbox.rs`);
//! - [`MaintenanceStore`]: migrations, the expiry sweep and the operator's views
//!   (`<db>/maintenance.rs`);
//! - [`InboxStore`](inbox::InboxStore): the consumer inbox (`<db>/inbox.rs`).
//!
//! With the feature `testing`, `TestingStore` adds the verification harness's test-only
//! reads and writes of the key table, beside the maintenance SQL (`<db>/maintenance.rs`).
//!
//! The store imports nothing from the rest of the crate: the records it returns are
//! defined here (a stored response comes back as `bytes::Bytes`, the type the protocol
//! replays, read without a copy: `stored_bytes.rs`). A second database is one more folder
//! implementing the five traits.

use std::future::Future;
use std::time::Duration;

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::pool::PoolConnection;
use sqlx::{Pool, Transaction};

pub(crate) mod choice;
pub(crate) mod inbox;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
mod records;
#[cfg(feature = "redis")]
pub(crate) mod redis;
mod requests;
mod sealed;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
mod stored_bytes;

pub use records::{
    AgeCounts, BODY_PREVIEW_BYTES, InProgressKey, IndexSize, KeyRecord, KeyStats, StateCount,
};
pub(crate) use records::{
    InProgressRow, InspectRow, StateRow, StatsRows, count, from_micros, header_lines, key_record,
    push_header_line,
};
pub(crate) use requests::KeyColumns;
pub(crate) use requests::{
    AttemptRef, AttemptRow, Claim, ClaimFailed, ClaimRequest, Completion, ExistingKey, OutboxRow,
    OwnedResponse, PeekedKey, PhaseRecord, PhasedClaim, StoredResponse,
};

/// Name of the table that records which of idem's migrations ran.
pub const MIGRATIONS_TABLE: &str = "_idem_migrations";

/// idem's migrations for `DB`, recorded in [`MIGRATIONS_TABLE`] rather than sqlx's own.
pub(crate) fn migrator<DB: Backend>() -> Migrator {
    let mut migrator = DB::migrator();
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

#[cfg(not(any(feature = "postgres", feature = "sqlite")))]
compile_error!("idem needs a database: enable the feature `postgres`, `sqlite` or both");

/// A database that can hold idem's keys. Implemented for `sqlx::Postgres` (feature
/// `postgres`) and `sqlx::Sqlite` (feature `sqlite`).
///
/// The trait is sealed: its methods are idem's storage protocol, not an extension point.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a database idem keeps keys in",
    label = "name `sqlx::Postgres` or `sqlx::Sqlite` here",
    note = "the type parameter of `idem::Tx` and `idem::Phases` names the database of the `Idem` the app registers"
)]
pub trait Backend:
    sqlx::Database + sealed::Sealed + PhaseStore + OutboxStore + MaintenanceStore + inbox::InboxStore
{
    /// What [`begin`](Self::begin) needs to open a request's transaction with a given
    /// claim wait, prepared once per setting rather than per request.
    #[doc(hidden)]
    type Opening: Clone + Send + Sync + 'static;

    /// Prepares the opening of request transactions whose claim waits at most
    /// `claim_wait` for a key held by another request.
    #[doc(hidden)]
    fn opening(claim_wait: Duration) -> Self::Opening;

    /// Opens the request's transaction on `conn`: on a [`ONE_WRITER`](Self::ONE_WRITER)
    /// backend, the connection the key was [`peek`](Self::peek)ed on, so a request takes
    /// one connection from the pool, not one for the read and another for the write.
    #[doc(hidden)]
    fn begin(
        conn: PoolConnection<Self>,
        opening: &Self::Opening,
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

    /// Whether [`begin_claim`](Self::begin_claim) sends the claim with the `BEGIN`, in
    /// one trip to the database: then the single-transaction form takes it rather than
    /// [`begin`](Self::begin) and [`claim`](Self::claim), and times the two as one.
    #[doc(hidden)]
    const CLAIMS_WITH_BEGIN: bool = false;

    /// Opens the request's transaction on `conn` and claims the key in it: what
    /// [`begin`](Self::begin) and then [`claim`](Self::claim) do, which a backend may send
    /// to the database together. The transaction is returned whatever the claim found.
    #[doc(hidden)]
    fn begin_claim(
        conn: PoolConnection<Self>,
        opening: &Self::Opening,
        request: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<(Transaction<'static, Self>, Claim), ClaimFailed>> {
        async move {
            let mut txn = Self::begin(conn, opening)
                .await
                .map_err(ClaimFailed::Begin)?;
            let claim = Self::claim(&mut txn, request)
                .await
                .map_err(ClaimFailed::Claim)?;
            Ok((txn, claim))
        }
    }

    /// Marks the claimed key completed with its response, in the same transaction.
    #[doc(hidden)]
    fn complete(
        conn: &mut Self::Connection,
        request: &ClaimRequest<'_>,
        response: &StoredResponse<'_>,
    ) -> impl Future<Output = Result<Completion, sqlx::Error>>;

    /// [`complete`](Self::complete), run to its end even when the returned future is
    /// dropped before (the client went away, a timeout around the handler gave up), for
    /// a store whose completion is not safe to stop halfway: PostgreSQL's staged body,
    /// whose `COPY` sqlx cannot abandon once its end was sent without leaving the
    /// connection a reply out of step. The transaction comes back with the outcome; if
    /// the caller is gone, it is dropped (rolled back) once the completion is done.
    #[doc(hidden)]
    fn complete_shielded(
        mut txn: Transaction<'static, Self>,
        request: &ClaimRequest<'_>,
        response: OwnedResponse,
    ) -> impl Future<Output = (Transaction<'static, Self>, Result<Completion, sqlx::Error>)> {
        async move {
            let completion = Self::complete(&mut txn, request, &response.stored()).await;
            (txn, completion)
        }
    }

    /// Whether an error means "another request holds this key's lock".
    #[doc(hidden)]
    fn is_lock_timeout(error: &sqlx::Error) -> bool;

    /// Whether an error means "an earlier statement failed; the transaction is aborted".
    #[doc(hidden)]
    fn is_aborted_transaction(error: &sqlx::Error) -> bool;

    /// Whether a failed COMMIT found no transaction to commit: the handler ended idem's
    /// transaction itself, so every statement after its COMMIT (the completion's too) ran
    /// on its own and is durable already. PostgreSQL only warns there and commits nothing.
    #[doc(hidden)]
    fn is_no_transaction(error: &sqlx::Error) -> bool {
        let _ = error;
        false
    }

    /// Whether the database lets one writer in at a time (SQLite): then a request that
    /// cannot get the write lock may be waiting for any other request, not for its key.
    #[doc(hidden)]
    const ONE_WRITER: bool = false;

    /// Reads the row that holds the key, outside any transaction and without taking a
    /// lock, so a replay or an in-progress answer need not wait for another request's
    /// write. Only a [`ONE_WRITER`](Self::ONE_WRITER) backend needs it; the others claim
    /// at once and answer `None` without a query.
    ///
    /// The read must leave no transaction (nor a read snapshot) open on `conn`:
    /// [`begin`](Self::begin) opens the request's transaction on the same connection next.
    #[doc(hidden)]
    fn peek(
        conn: &mut Self::Connection,
        request: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Option<PeekedKey>, sqlx::Error>> {
        let _ = (conn, request);
        async { Ok(None) }
    }

    /// Reads the row that holds `request`'s scope and key, outside any transaction and
    /// without a lock, on every backend: the read of a signed sender's key under the name
    /// it was stored by before the `webhook:` namespace.
    #[doc(hidden)]
    fn read_key(
        conn: &mut Self::Connection,
        request: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Option<PeekedKey>, sqlx::Error>> + Send;

    /// Whether a failed COMMIT certainly rolled the transaction back: the database
    /// answered that it refused it (a deferred constraint, say). Any other failure (the
    /// connection lost before the answer came) leaves the outcome unknown.
    #[doc(hidden)]
    fn is_definite_rollback(error: &sqlx::Error) -> bool {
        error
            .as_database_error()
            .is_some_and(|e| !matches!(e.kind(), sqlx::error::ErrorKind::Other))
    }
}

/// The phased form's writes. Every write of an attempt names its fencing token, and the
/// store refuses it once a takeover has replaced that token.
#[doc(hidden)]
pub trait PhaseStore: sqlx::Database {
    /// Inserts the key with a lease for a phased attempt, or reports the row that holds
    /// it. A key whose retention ended (and whose lease is free) is reclaimed as new.
    fn claim_phased(
        conn: &mut Self::Connection,
        request: &ClaimRequest<'_>,
        lease: Duration,
    ) -> impl Future<Output = Result<PhasedClaim, sqlx::Error>>;

    /// Takes over the attempt holding fencing token `seen`, if its lease has expired and
    /// no one else took it over first; returns the new attempt with the phases recorded.
    fn take_over(
        conn: &mut Self::Connection,
        request: &ClaimRequest<'_>,
        seen: i64,
        lease: Duration,
    ) -> impl Future<Output = Result<Option<AttemptRow>, sqlx::Error>>;

    /// Opens a phase's transaction.
    fn begin_phase(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<Transaction<'static, Self>, sqlx::Error>>;

    /// Records a phase's output and moves the recovery point, in the phase's transaction,
    /// if the attempt still holds its fencing token; renews the lease.
    fn record_phase(
        conn: &mut Self::Connection,
        attempt: &AttemptRef<'_>,
        phase: &str,
        output: &str,
    ) -> impl Future<Output = Result<PhaseRecord, sqlx::Error>>;

    /// Pushes the lease of a live attempt forward; false when it was taken over.
    fn extend_lease(
        conn: &mut Self::Connection,
        attempt: &AttemptRef<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>>;

    /// Ends the lease of an attempt that failed, so a retry may take over at once.
    fn release_lease(
        conn: &mut Self::Connection,
        attempt: &AttemptRef<'_>,
    ) -> impl Future<Output = Result<(), sqlx::Error>>;

    /// Marks a phased key completed with its response; false when it was taken over.
    fn complete_phased(
        conn: &mut Self::Connection,
        attempt: &AttemptRef<'_>,
        response: &StoredResponse<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>>;

    /// [`complete_phased`](Self::complete_phased) on a connection of `pool`, run to its
    /// end even when the returned future is dropped, where the store needs that (see
    /// [`Backend::complete_shielded`]).
    fn complete_phased_shielded(
        pool: &Pool<Self>,
        attempt: &AttemptRef<'_>,
        response: OwnedResponse,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> {
        async move {
            let mut conn = pool.acquire().await?;
            Self::complete_phased(&mut *conn, attempt, &response.stored()).await
        }
    }
}

/// The outbox's writes and the relay's takes. The relay's calls are `Send` because the
/// relay is handed to `tokio::spawn`.
#[doc(hidden)]
pub trait OutboxStore: sqlx::Database {
    /// Writes a message into the outbox in the caller's transaction; returns its id.
    fn enqueue(
        conn: &mut Self::Connection,
        topic: &str,
        payload: &str,
    ) -> impl Future<Output = Result<String, sqlx::Error>>;

    /// Takes up to `limit` due messages for the take `holder` (a token fresh for each
    /// take) and hides them from other relays for `hold`. Counts no attempt.
    fn take_messages(
        conn: &mut Self::Connection,
        limit: u32,
        hold: Duration,
        holder: i64,
    ) -> impl Future<Output = Result<Vec<OutboxRow>, sqlx::Error>> + Send;

    /// Starts a delivery of a message the take `holder` holds: hides it for `hold` from
    /// now and counts the attempt, which it returns (1 the first time). `None` when
    /// another take holds the message now, or it was delivered.
    fn claim_message(
        conn: &mut Self::Connection,
        id: &str,
        holder: i64,
        hold: Duration,
    ) -> impl Future<Output = Result<Option<i32>, sqlx::Error>> + Send;

    /// Hides a message in delivery for `hold` from now, if the take `holder` still holds
    /// it; false when it does not.
    fn renew_message(
        conn: &mut Self::Connection,
        id: &str,
        holder: i64,
        hold: Duration,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Marks a message delivered, if the take `holder` still holds it; false when it does
    /// not (nothing is written then).
    fn mark_delivered(
        conn: &mut Self::Connection,
        id: &str,
        holder: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Schedules another delivery of a message after `retry_in`, if the take `holder`
    /// still holds it; false when it does not (nothing is written then).
    fn mark_failed(
        conn: &mut Self::Connection,
        id: &str,
        holder: i64,
        retry_in: Duration,
        error: &str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Makes messages the take `holder` still holds due again at once (the relay stops
    /// before delivering them); returns how many it gave back.
    fn release_messages(
        conn: &mut Self::Connection,
        ids: &[String],
        holder: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Deletes up to `limit` messages delivered more than `age` ago.
    fn purge_delivered(
        conn: &mut Self::Connection,
        age: Duration,
        limit: u32,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;
}

/// Migrations, expiry and the operator's views. `Send`, because the expiry task is
/// handed to `tokio::spawn`.
#[doc(hidden)]
pub trait MaintenanceStore: sqlx::Database {
    /// idem's migrations for this database.
    fn migrator() -> Migrator;

    /// Applies `migrator` (idem's, with its own history table).
    fn run_migrations<'a>(
        migrator: &'a Migrator,
        pool: &'a Pool<Self>,
    ) -> impl Future<Output = Result<(), MigrateError>> + Send + 'a;

    /// The statement (or script) that deletes one batch of up to `batch_size` expired keys.
    fn batch_statement(batch_size: u32) -> String;

    /// Runs one batch built by [`batch_statement`](Self::batch_statement); returns the
    /// rows it deleted.
    fn delete_batch(
        pool: &Pool<Self>,
        statement: &str,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// The statement that deletes one batch of up to `batch_size` staged bodies that no
    /// completion will take (PostgreSQL's `idem_staged_bodies`; its implementation says
    /// which), run by [`delete_batch`](Self::delete_batch); `None` where nothing is staged.
    fn orphans_batch_statement(batch_size: u32) -> Option<String> {
        let _ = batch_size;
        None
    }

    /// The database's plan for one batch, one line per element.
    fn explain_batch(
        pool: &Pool<Self>,
        batch_size: u32,
    ) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send;

    /// Rows a sweep started now would delete.
    fn count_deletable(pool: &Pool<Self>) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// `(version, success, checksum)` of idem's applied migrations; `None` without a
    /// history table.
    fn applied_migrations(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<Option<Vec<AppliedMigration>>, sqlx::Error>> + Send;

    /// Counts by state and age, the oldest key in progress, sizes on disk.
    fn key_stats(pool: &Pool<Self>) -> impl Future<Output = Result<KeyStats, sqlx::Error>> + Send;

    /// One key row with at most `preview` bytes of its body.
    fn inspect_key(
        pool: &Pool<Self>,
        scope: &str,
        key: &str,
        preview: usize,
    ) -> impl Future<Output = Result<Option<KeyRecord>, sqlx::Error>> + Send;

    /// How many keys are in progress past their retention with no live lease, and the
    /// `created_at` (microseconds) of the oldest.
    fn count_stranded(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<(u64, Option<i64>), sqlx::Error>> + Send;

    /// Up to `limit` keys in progress past their retention with no live lease, oldest
    /// first.
    fn stranded_keys(
        pool: &Pool<Self>,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<StrandedRow>, sqlx::Error>> + Send;

    /// `(phase, output as JSON text, recorded at in microseconds)` of a key's recorded
    /// phases, in the order they committed.
    fn recorded_phases(
        pool: &Pool<Self>,
        scope: &str,
        key: &str,
    ) -> impl Future<Output = Result<Vec<(String, String, i64)>, sqlx::Error>> + Send;

    /// Whether any stored response starts with `marker` (the mark of a sealed value):
    /// whether an application with a keyring writes to this table.
    fn holds_sealed_responses(
        pool: &Pool<Self>,
        marker: &[u8],
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// The generation of a key's row, if it has one.
    fn generation_of(
        pool: &Pool<Self>,
        scope: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<i64>, sqlx::Error>> + Send;

    /// Completes a `started` key of `generation` whose lease is free with `response`
    /// (sealed to that generation), fencing out any attempt, and keeps it for `keep`;
    /// says why not otherwise.
    fn resolve_key(
        pool: &Pool<Self>,
        scope: &str,
        key: &str,
        generation: i64,
        response: &StoredResponse<'_>,
        keep: Duration,
    ) -> impl Future<Output = Result<Resolved, sqlx::Error>> + Send;
}

/// The test-only calls of `idem::testing` (feature `testing`): a key row found by its
/// key alone, its lease ended and its times moved into the past, and whether the sweep's
/// index exists. The harness draws a fresh random key for every check, so the key alone
/// finds the row without knowing how the application's scope is spelled.
#[cfg(feature = "testing")]
pub(crate) trait TestingStore: sqlx::Database {
    /// The row holding `key`, whatever its scope.
    fn test_key_row(
        pool: &Pool<Self>,
        key: &str,
    ) -> impl Future<Output = Result<Option<TestKeyRow>, sqlx::Error>>;

    /// Ends the lease of the attempt holding `key`, as if it ran out; returns the rows
    /// changed.
    fn test_end_lease(
        pool: &Pool<Self>,
        key: &str,
    ) -> impl Future<Output = Result<u64, sqlx::Error>>;

    /// Moves `key`'s retention and lease into the past; returns the rows changed.
    fn test_age_key(pool: &Pool<Self>, key: &str)
    -> impl Future<Output = Result<u64, sqlx::Error>>;

    /// Whether the index the expiry sweep finds due rows by (`idem_keys_expires_at`)
    /// exists.
    fn test_expiry_index(pool: &Pool<Self>) -> impl Future<Output = Result<bool, sqlx::Error>>;
}

/// A key row as the harness reads it.
#[cfg(feature = "testing")]
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct TestKeyRow {
    /// `started` or `completed`.
    pub(crate) state: String,
    pub(crate) recovery_point: String,
    /// Whether an attempt holds a lease that has not run out.
    pub(crate) leased: bool,
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

/// What [`MaintenanceStore::resolve_key`] did.
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

/// `(version, success, checksum)` of a row of idem's migration history.
pub(crate) type AppliedMigration = (i64, bool, Vec<u8>);

#[cfg(test)]
mod architecture;
