//! The phased form: a handler that calls external providers runs named phases, each in
//! its own transaction, so a crash at any point is recovered exactly once.
//!
//! The claim commits first, with a lease. Each phase commits its writes together with
//! its output and the key's recovery point. An attempt whose lease runs out may be taken
//! over by a retry, which replaces the key's fencing token: from then on every write of
//! the old attempt (a phase, a lease extension, the response) matches no row and is
//! rolled back, while the new attempt gets the committed phases' outputs without running
//! them again.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use futures_util::FutureExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use tracing::Instrument;

use crate::flow::{
    Prepared, Unbuffered, answer_existing, in_progress, mismatched, storage_unavailable,
};
use crate::metrics::timed;
use crate::outcome::Outcome;
use crate::problem::ProblemKind;
use crate::store::{
    AttemptRef, AttemptRow, Backend, DefaultBackend, PhaseRecord, PhasedClaim, StoredResponse,
};
use crate::{Idem, Tx};

/// The longest phase name, in bytes; names are stored beside each recorded output.
///
/// ```
/// assert!("payment_created".len() <= idem_runtime::MAX_PHASE_NAME_LEN);
/// ```
pub const MAX_PHASE_NAME_LEN: usize = 200;

/// The handler parameter of the phased form: runs named phases, each in a transaction of
/// its own, and remembers their outputs across crashes and retries.
///
/// Write `phases: idem::Phases` in a handler whose `#[idempotent]` attribute sets a
/// `lease`; the macro makes the binding mutable. Each [`run`](Self::run) is one atomic
/// step: its writes, its output and the key's recovery point commit together. When a
/// retry takes over an attempt that crashed, a phase that committed returns its recorded
/// output without running again, and the handler continues from there.
///
/// ```
/// use actix_web::error::ErrorInternalServerError;
/// use idem_runtime::Phases;
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Payment {
///     id: i64,
/// }
///
/// // The body of a phased handler reads like straight-line code.
/// async fn pay(phases: &mut Phases<sqlx::Postgres>, amount: i64) -> actix_web::Result<Payment> {
///     let payment: Payment = phases
///         .run("payment_created", async |mut tx| {
///             let id = sqlx::query_scalar("INSERT INTO payments (amount) VALUES ($1) RETURNING id")
///                 .bind(amount)
///                 .fetch_one(&mut *tx)
///                 .await
///                 .map_err(ErrorInternalServerError)?;
///             Ok::<_, actix_web::Error>(Payment { id })
///         })
///         .await?;
///     let provider_key = phases.derived_key("charge");
///     phases
///         .run("charged", async |mut tx| {
///             // Call the provider with `provider_key`, then record what it answered.
///             # let _ = &provider_key;
///             sqlx::query("UPDATE payments SET state = 'charged' WHERE id = $1")
///                 .bind(payment.id)
///                 .execute(&mut *tx)
///                 .await
///                 .map_err(ErrorInternalServerError)?;
///             Ok::<_, actix_web::Error>(())
///         })
///         .await?;
///     Ok(payment)
/// }
/// ```
///
/// Code outside phases runs again on every attempt, including takeovers: keep it to
/// computing the response from the phases' outputs. Side effects belong in phases, and
/// calls to other services take a [`derived_key`](Self::derived_key).
pub struct Phases<DB: crate::store::ChosenBackend<'static> = DefaultBackend> {
    idem: Idem<DB>,
    attempt: Arc<Attempt>,
    /// Outputs of the phases committed before this attempt, by name.
    recorded: HashMap<String, String>,
    /// Names run in this attempt, to refuse a name used twice.
    ran: HashSet<String>,
    recovery_point: Option<String>,
}

/// One attempt at a phased key: what its writes are fenced by, and how it ended early.
struct Attempt {
    scope: String,
    key: String,
    generation: i64,
    fencing_token: i64,
    lease: Duration,
    /// Set by the first failure that ends the attempt, or when the handler returned;
    /// every later call reports it.
    ended: Mutex<Option<PhaseErrorKind>>,
}

impl Attempt {
    fn fenced(&self) -> AttemptRef<'_> {
        AttemptRef {
            scope: &self.scope,
            key: &self.key,
            fencing_token: self.fencing_token,
            lease: self.lease,
        }
    }

    fn ended(&self) -> Option<PhaseErrorKind> {
        *self.ended.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ends the attempt (the first reason stands) and returns the error to hand back.
    fn end(
        &self,
        kind: PhaseErrorKind,
        phase: Option<&str>,
        source: Option<sqlx::Error>,
    ) -> PhaseError {
        let mut ended = self.ended.lock().unwrap_or_else(PoisonError::into_inner);
        let kind = *ended.get_or_insert(kind);
        PhaseError {
            kind,
            phase: phase.map(str::to_owned),
            source,
        }
    }
}

impl<DB: Backend> Phases<DB> {
    fn new(idem: Idem<DB>, attempt: Arc<Attempt>, row: AttemptRow) -> Self {
        Self {
            idem,
            attempt,
            recorded: row.recorded.into_iter().collect(),
            ran: HashSet::new(),
            recovery_point: row.recovery_point,
        }
    }

    /// Runs the phase `name` in a transaction of its own, or returns its recorded output
    /// if an earlier attempt at this key committed it.
    ///
    /// `phase` gets the phase's transaction ([`Tx`]); its `Ok` output is serialized and
    /// recorded in that transaction together with the key's recovery point and a renewal
    /// of the lease, then the transaction commits. An `Err` rolls the phase back and is
    /// returned as it is: the handler decides what to answer (a 4xx is recorded and
    /// replayed like any final answer; a 5xx leaves the key to be resumed by a retry).
    ///
    /// idem's own failures come back as [`PhaseError`] converted into `E`. They end the
    /// attempt: later phases return the same error without running, and whatever the
    /// handler answers, the client gets idem's problem response instead (409 when a retry
    /// took the attempt over, 503 when the database failed).
    ///
    /// ```
    /// # async fn f(phases: &mut idem_runtime::Phases<sqlx::Postgres>) -> Result<(), idem_runtime::PhaseError> {
    /// let id: i64 = phases
    ///     .run("created", async |mut tx| {
    ///         let id = sqlx::query_scalar("SELECT 42::int8").fetch_one(&mut *tx).await;
    ///         id.map_err(idem_runtime::PhaseError::from)
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    /// If `name` is empty, longer than [`MAX_PHASE_NAME_LEN`] bytes or already run in this
    /// request; if the output fails to serialize; or if a recorded output does not
    /// deserialize as `T` (its type changed while the key was in progress). These are bugs
    /// in the handler: idem answers 500 and keeps the key for a retry after the fix.
    pub async fn run<T, E, F>(&mut self, name: &str, phase: F) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: From<PhaseError>,
        F: for<'t> AsyncFnOnce(Tx<'t, DB>) -> Result<T, E>,
    {
        check_phase_name(name);
        assert!(
            self.ran.insert(name.to_owned()),
            "idem: phase `{name}` runs twice in one request; give each phase its own name"
        );
        if let Some(kind) = self.attempt.ended() {
            return Err(self.attempt.end(kind, Some(name), None).into());
        }
        if let Some(output) = self.recorded.get(name) {
            tracing::debug!(
                phase = name,
                "phase committed by an earlier attempt; not run"
            );
            return Ok(decode_output(name, output));
        }
        self.run_new(name, phase)
            .instrument(tracing::debug_span!("phase", name))
            .await
    }

    async fn run_new<T, E, F>(&mut self, name: &str, phase: F) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: From<PhaseError>,
        F: for<'t> AsyncFnOnce(Tx<'t, DB>) -> Result<T, E>,
    {
        let attempt = &*self.attempt;
        let mut txn = match DB::begin_phase(self.idem.pool()).await {
            Ok(txn) => txn,
            Err(error) => {
                return Err(attempt
                    .end(PhaseErrorKind::Storage, Some(name), Some(error))
                    .into());
            }
        };
        // An `Err` returns here and drops the transaction, which rolls it back.
        let output = phase(Tx::new(&mut *txn)).await?;
        let json = serde_json::to_string(&output).unwrap_or_else(|error| {
            panic!(
                "idem: the output of phase `{name}` ({}) cannot be serialized: {error}",
                std::any::type_name::<T>()
            )
        });
        let ended = match DB::record_phase(&mut txn, &attempt.fenced(), name, &json).await {
            Ok(PhaseRecord::Recorded) => match txn.commit().await {
                Ok(()) => return Ok(output),
                // The commit's outcome is unknown; a retry finds out from the key row.
                Err(error) => (PhaseErrorKind::Storage, Some(error)),
            },
            Ok(PhaseRecord::TakenOver) => {
                tracing::warn!(
                    phase = name,
                    "a retry took this attempt over while the phase ran; its writes were rolled back"
                );
                (PhaseErrorKind::TakenOver, None)
            }
            Ok(PhaseRecord::TransactionEnded) => {
                tracing::error!(
                    phase = name,
                    "the phase committed or rolled back idem's transaction itself; never end it by hand"
                );
                (PhaseErrorKind::TransactionEnded, None)
            }
            Err(error) if DB::is_aborted_transaction(&error) => {
                tracing::error!(
                    phase = name,
                    "the phase returned Ok although one of its statements failed; its writes were lost"
                );
                (PhaseErrorKind::TransactionAborted, Some(error))
            }
            Err(error) => (PhaseErrorKind::Storage, Some(error)),
        };
        Err(attempt.end(ended.0, Some(name), ended.1).into())
    }

    /// A key for a call to another service in the step `step`, for the provider to
    /// deduplicate by (e.g. its `Idempotency-Key` header).
    ///
    /// The key is the same on every retry and takeover of this request, so a provider
    /// that saw the call before answers with its first result instead of acting twice,
    /// even when idem lost the record of that call (a crash between the call and the end
    /// of its phase). It differs across scopes for the same client key, so two accounts
    /// using one `Idempotency-Key` never collide at a provider account the platform
    /// shares, and across steps of one request.
    ///
    /// Format: a UUID of version 8 (RFC 9562) made of the first 128 bits of SHA-256 over
    /// `idem derived key v1`, the scope, the client's key, the key's generation and
    /// `step`, each length-prefixed. 36 characters, lowercase hex with hyphens, so
    /// providers that limit key length (often 64 or 255) or require a UUID accept it. The
    /// generation changes only when a key is reused after its retention: a new operation
    /// under an old key gets new derived keys.
    ///
    /// ```
    /// # fn f(phases: &idem_runtime::Phases<sqlx::Postgres>) {
    /// let key = phases.derived_key("charge");
    /// assert_eq!(key.len(), 36);
    /// assert_ne!(key, phases.derived_key("refund"));
    /// # }
    /// ```
    pub fn derived_key(&self, step: &str) -> String {
        let attempt = &*self.attempt;
        derive_key(&attempt.scope, &attempt.key, attempt.generation, step)
    }

    /// A handle to extend this attempt's lease from inside a long phase.
    ///
    /// Each phase that commits renews the lease, so the lease need only cover the longest
    /// phase. A phase that may run longer (a slow provider call, a long import) calls
    /// [`Lease::extend`] while it runs; the handle is `Send`, so a spawned heartbeat can
    /// hold it too.
    ///
    /// ```
    /// # async fn f(phases: &mut idem_runtime::Phases<sqlx::Postgres>) -> Result<(), idem_runtime::PhaseError> {
    /// let lease = phases.lease();
    /// phases
    ///     .run("imported", async |tx| {
    ///         for _chunk in 0..3 {
    ///             // ... a slow step ...
    ///             lease.extend().await?;
    ///         }
    ///         # let _ = tx;
    ///         Ok::<_, idem_runtime::PhaseError>(())
    ///     })
    ///     .await
    /// # }
    /// ```
    pub fn lease(&self) -> Lease<DB> {
        Lease {
            idem: self.idem.clone(),
            attempt: Arc::clone(&self.attempt),
        }
    }

    /// The last phase committed before this attempt, when it resumes a key an earlier
    /// attempt left unfinished; `None` for a first attempt.
    ///
    /// ```
    /// # fn f(phases: &idem_runtime::Phases<sqlx::Postgres>) {
    /// if let Some(point) = phases.recovery_point() {
    ///     tracing::info!(point, "resuming a payment");
    /// }
    /// # }
    /// ```
    pub fn recovery_point(&self) -> Option<&str> {
        self.recovery_point.as_deref()
    }
}

impl<DB: Backend> fmt::Debug for Phases<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Phases")
            .field("scope", &self.attempt.scope)
            .field("fencing_token", &self.attempt.fencing_token)
            .field("lease", &self.attempt.lease)
            .field("recovery_point", &self.recovery_point)
            .finish_non_exhaustive()
    }
}

/// Extends the lease of a phased attempt; from [`Phases::lease`].
///
/// ```
/// # async fn f(phases: &idem_runtime::Phases<sqlx::Postgres>) -> Result<(), idem_runtime::PhaseError> {
/// let lease = phases.lease();
/// // A heartbeat on another task: the handle is `Send` and cheap to clone.
/// let heartbeat = lease.clone();
/// tokio::spawn(async move {
///     while heartbeat.extend().await.is_ok() {
///         tokio::time::sleep(heartbeat.duration() / 3).await;
///     }
/// });
/// # Ok(())
/// # }
/// ```
pub struct Lease<DB: crate::store::ChosenBackend<'static> = DefaultBackend> {
    idem: Idem<DB>,
    attempt: Arc<Attempt>,
}

impl<DB: Backend> Lease<DB> {
    /// Pushes the lease to a full lease from now, so no retry takes the attempt over for
    /// that long.
    ///
    /// Runs on a connection of its own (the phase's transaction is not committed yet, so a
    /// write in it would not be seen). Fails with [`PhaseErrorKind::TakenOver`] when a
    /// retry has already taken the attempt over: stop working, nothing more it writes
    /// will be recorded.
    ///
    /// On SQLite, which has one writer at a time, extend before the phase's first write:
    /// once the phase has written, its transaction holds the write lock, the extension
    /// waits for it until the busy timeout and the attempt ends as a storage failure.
    /// (While the phase holds the lock, no retry can take the key over either.)
    ///
    /// ```
    /// # async fn f(lease: &idem_runtime::Lease<sqlx::Postgres>) -> Result<(), idem_runtime::PhaseError> {
    /// lease.extend().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self) -> Result<(), PhaseError> {
        let attempt = &*self.attempt;
        if let Some(kind) = attempt.ended() {
            return Err(attempt.end(kind, None, None));
        }
        let extended = async {
            let mut conn = self.idem.pool().acquire().await?;
            DB::extend_lease(&mut conn, &attempt.fenced()).await
        }
        .await;
        match extended {
            Ok(true) => Ok(()),
            Ok(false) => Err(attempt.end(PhaseErrorKind::TakenOver, None, None)),
            Err(error) => Err(attempt.end(PhaseErrorKind::Storage, None, Some(error))),
        }
    }

    /// How long one extension (and each phase's renewal) holds the key: the handler's
    /// `lease` argument.
    ///
    /// ```
    /// # fn f(lease: &idem_runtime::Lease<sqlx::Postgres>) {
    /// let every = lease.duration() / 3;
    /// # let _ = every;
    /// # }
    /// ```
    pub fn duration(&self) -> Duration {
        self.attempt.lease
    }
}

impl<DB: Backend> Clone for Lease<DB> {
    fn clone(&self) -> Self {
        Self {
            idem: self.idem.clone(),
            attempt: Arc::clone(&self.attempt),
        }
    }
}

impl<DB: Backend> fmt::Debug for Lease<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("duration", &self.attempt.lease)
            .field("fencing_token", &self.attempt.fencing_token)
            .finish_non_exhaustive()
    }
}

/// Why idem could not run or record a phase. It ends the attempt.
///
/// Convert it into the handler's error type (`E: From<PhaseError>`); it implements
/// [`ResponseError`], so `actix_web::Error` accepts it as is. Whatever the handler then
/// answers, idem sends the client its own problem response for the kind: the attempt
/// can record nothing more.
///
/// ```
/// use idem_runtime::{PhaseError, PhaseErrorKind};
///
/// #[derive(Debug)]
/// enum AppError {
///     Idem(PhaseError),
///     Database(sqlx::Error),
/// }
///
/// impl From<PhaseError> for AppError {
///     fn from(error: PhaseError) -> Self {
///         Self::Idem(error)
///     }
/// }
///
/// fn retryable(error: &AppError) -> bool {
///     matches!(error, AppError::Idem(e) if e.kind() == PhaseErrorKind::Storage)
/// }
/// # let _ = AppError::Database(sqlx::Error::RowNotFound);
/// ```
#[derive(Debug)]
pub struct PhaseError {
    kind: PhaseErrorKind,
    phase: Option<String>,
    source: Option<sqlx::Error>,
}

/// What ended a phased attempt.
///
/// ```
/// use idem_runtime::{PhaseError, PhaseErrorKind};
///
/// fn worth_logging(error: &PhaseError) -> bool {
///     // A takeover is the protocol working; the others need a look.
///     error.kind() != PhaseErrorKind::TakenOver
/// }
/// # let _ = worth_logging;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PhaseErrorKind {
    /// The lease ran out and a retry took the attempt over; it can record nothing more.
    /// The client gets 409 `request-in-progress` and, retrying, the outcome of the attempt
    /// that took over.
    TakenOver,
    /// The database failed or could not be reached. The client gets 503
    /// `storage-unavailable`; a retry resumes after the last committed phase.
    Storage,
    /// The phase ran `COMMIT` or `ROLLBACK` on idem's transaction itself (500
    /// `transaction-ended`).
    TransactionEnded,
    /// The phase returned `Ok` although one of its statements failed, so its writes were
    /// lost (500 `transaction-aborted`).
    TransactionAborted,
    /// The handler has returned: the attempt is over and holds no lease any more. Only a
    /// [`Lease`] kept past the handler (a heartbeat task) sees it; stop extending.
    Finished,
}

impl PhaseError {
    /// What went wrong.
    ///
    /// ```
    /// # fn f(error: &idem_runtime::PhaseError) {
    /// if error.kind() == idem_runtime::PhaseErrorKind::TakenOver {
    ///     tracing::info!("a retry took over; stopping");
    /// }
    /// # }
    /// ```
    pub fn kind(&self) -> PhaseErrorKind {
        self.kind
    }

    /// The phase it happened in, if it happened in one (not in [`Lease::extend`]).
    ///
    /// ```
    /// # fn f(error: &idem_runtime::PhaseError) {
    /// tracing::warn!(phase = error.phase(), %error, "payment not completed");
    /// # }
    /// ```
    pub fn phase(&self) -> Option<&str> {
        self.phase.as_deref()
    }

    fn problem(kind: PhaseErrorKind) -> HttpResponse {
        match kind {
            PhaseErrorKind::TakenOver => ProblemKind::InProgress.response(
                "this attempt's lease ran out and a retry took the request over; retry to \
                 get its outcome",
            ),
            PhaseErrorKind::Storage => ProblemKind::StorageUnavailable.response(
                "the request could not be completed; the steps it completed are kept and a \
                 retry with the same key resumes after them",
            ),
            PhaseErrorKind::TransactionEnded => ProblemKind::TransactionEnded.response(
                "the request failed; the steps it completed are kept and a retry with the \
                 same key resumes after them",
            ),
            PhaseErrorKind::TransactionAborted => ProblemKind::TransactionAborted.response(
                "the request failed; the steps it completed are kept and a retry with the \
                 same key resumes after them",
            ),
            // Never answered by idem: it arises only after the handler returned.
            PhaseErrorKind::Finished => ProblemKind::InProgress
                .response("this attempt is over; retry to get the request's outcome"),
        }
    }
}

impl fmt::Display for PhaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            PhaseErrorKind::TakenOver => "the attempt was taken over by a retry",
            PhaseErrorKind::Storage => "the idempotency key store failed",
            PhaseErrorKind::TransactionEnded => "the phase ended idem's transaction itself",
            PhaseErrorKind::TransactionAborted => "a statement of the phase failed",
            PhaseErrorKind::Finished => "the attempt is over",
        };
        match &self.phase {
            Some(phase) => write!(f, "phase `{phase}`: {what}")?,
            None => f.write_str(what)?,
        }
        match &self.source {
            Some(source) => write!(f, ": {source}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for PhaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A database error inside a phase's own code is a storage failure of the phase: the
/// phase rolls back and idem answers 503. Lets phases use `?` on sqlx calls with
/// `PhaseError` as their error type.
impl From<sqlx::Error> for PhaseError {
    fn from(error: sqlx::Error) -> Self {
        Self {
            kind: PhaseErrorKind::Storage,
            phase: None,
            source: Some(error),
        }
    }
}

impl ResponseError for PhaseError {
    fn status_code(&self) -> StatusCode {
        Self::problem(self.kind).status()
    }

    fn error_response(&self) -> HttpResponse {
        Self::problem(self.kind)
    }
}

fn check_phase_name(name: &str) {
    assert!(
        !name.is_empty() && name.len() <= MAX_PHASE_NAME_LEN,
        "idem: a phase name has 1 to {MAX_PHASE_NAME_LEN} bytes, not {}",
        name.len()
    );
}

fn decode_output<T: DeserializeOwned>(name: &str, output: &str) -> T {
    serde_json::from_str(output).unwrap_or_else(|error| {
        panic!(
            "idem: phase `{name}` was recorded with an output that does not read as `{}` \
             ({error}); did its type change while the key was in progress?",
            std::any::type_name::<T>()
        )
    })
}

/// See [`Phases::derived_key`] for the format, which must never change: providers
/// deduplicate by it across deploys.
pub(crate) fn derive_key(scope: &str, key: &str, generation: i64, step: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"idem derived key v1");
    for part in [scope.as_bytes(), key.as_bytes()] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.update(generation.to_be_bytes());
    hasher.update((step.len() as u64).to_be_bytes());
    hasher.update(step.as_bytes());
    let digest = hasher.finalize();
    let mut bytes: [u8; 16] = digest[..16].try_into().expect("SHA-256 has 32 bytes");
    // Version 8 ("custom") and the RFC 9562 variant.
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

impl<DB: Backend> Prepared<DB> {
    /// The phased form: claims the key with a lease (or takes over an attempt whose lease
    /// ran out), runs the handler with [`Phases`], and records its response; or replays,
    /// or answers the problem the protocol calls for.
    pub async fn run_phased<F>(self, scope: &str, lease: Duration, handler: F) -> HttpResponse
    where
        F: AsyncFnOnce(Phases<DB>) -> HttpResponse,
    {
        let span = tracing::debug_span!(
            "idempotent",
            handler = self.policy.handler(),
            outcome = tracing::field::Empty,
        );
        let policy = self.policy;
        let (response, outcome) = self
            .run_phased_inner(scope, lease, handler)
            .instrument(span.clone())
            .await;
        span.record("outcome", outcome.as_str());
        crate::metrics::outcome(policy, outcome);
        crate::webhook::after(policy, outcome);
        response
    }

    async fn run_phased_inner<F>(
        self,
        scope: &str,
        lease: Duration,
        handler: F,
    ) -> (HttpResponse, Outcome)
    where
        F: AsyncFnOnce(Phases<DB>) -> HttpResponse,
    {
        let identity = match self.identify() {
            Ok(identity) => identity,
            Err(answer) => return answer,
        };
        let claim = identity.claim(scope, self.policy.retention(), self.idem.claim_wait_time());
        if let Some(answer) = self.answer_from_read(&claim, true).await {
            return answer;
        }

        // The claim commits on its own, before any phase: the lease is what keeps
        // duplicates out from here on, not an open transaction.
        let mut txn = match timed(
            self.policy,
            "begin",
            DB::begin(self.idem.pool(), self.idem.opening()),
        )
        .await
        {
            Ok(txn) => txn,
            // SQLite: another request holds the database's write lock past `claim_wait`.
            Err(error) if DB::is_lock_timeout(&error) => return self.busy(&claim),
            Err(error) => return (storage_unavailable(&error), Outcome::StorageError),
        };
        let row = match timed(
            self.policy,
            "claim",
            DB::claim_phased(&mut txn, &claim, lease),
        )
        .await
        {
            Ok(PhasedClaim::Claimed(row)) => row,
            Ok(PhasedClaim::Existing {
                key,
                lease_expired,
                fencing_token,
            }) => {
                if let Some(answer) = mismatched(&key, &claim) {
                    let _ = txn.rollback().await;
                    return answer;
                }
                if key.completed || !lease_expired {
                    let _ = txn.rollback().await;
                    return match crate::encryption::open(self.idem.keyring(), &claim, key) {
                        Ok(key) => answer_existing(key, &claim),
                        Err(answer) => answer,
                    };
                }
                let take_over = DB::take_over(&mut txn, &claim, fencing_token, lease);
                match timed(self.policy, "take_over", take_over).await {
                    Ok(Some(row)) => {
                        crate::metrics::takeover(self.policy);
                        tracing::info!(
                            recovery_point = row.recovery_point.as_deref(),
                            "took over an attempt whose lease ran out"
                        );
                        row
                    }
                    // Another retry took over first, or the holder renewed its lease.
                    Ok(None) => return (in_progress(), Outcome::InProgress),
                    Err(error) if DB::is_lock_timeout(&error) => {
                        return (in_progress(), Outcome::InProgress);
                    }
                    Err(error) => return (storage_unavailable(&error), Outcome::StorageError),
                }
            }
            Ok(PhasedClaim::Vanished) => return (in_progress(), Outcome::InProgress),
            Err(error) if DB::is_lock_timeout(&error) => {
                return (in_progress(), Outcome::InProgress);
            }
            Err(error) => return (storage_unavailable(&error), Outcome::StorageError),
        };
        if let Err(error) = timed(self.policy, "commit", txn.commit()).await {
            return (storage_unavailable(&error), Outcome::StorageError);
        }

        let attempt = Arc::new(Attempt {
            scope: claim.scope.to_owned(),
            key: claim.key.to_owned(),
            generation: row.generation,
            fencing_token: row.fencing_token,
            lease,
            ended: Mutex::new(None),
        });
        let phases = Phases::new(self.idem.clone(), Arc::clone(&attempt), row);
        let result = AssertUnwindSafe(handler(phases)).catch_unwind().await;
        // A `Lease` the handler handed to a task of its own must stop extending now, or it
        // would hold off the retry that the released lease is meant to let in.
        let ended = attempt.ended();
        attempt.end(PhaseErrorKind::Finished, None, None);

        if let Some(kind) = ended {
            if kind != PhaseErrorKind::TakenOver {
                self.release(&attempt).await;
            }
            let outcome = match kind {
                PhaseErrorKind::TakenOver => Outcome::TakenOver,
                _ => Outcome::PhaseFailed,
            };
            return (PhaseError::problem(kind), outcome);
        }
        let response = match result {
            Ok(response) => response,
            Err(_) => {
                // The panic message was printed by the panic hook. Committed phases stay.
                tracing::error!(
                    handler = self.policy.handler(),
                    "handler panicked; its committed phases are kept for a retry"
                );
                self.release(&attempt).await;
                let response = ProblemKind::HandlerPanicked.response(
                    "the request failed; the steps it completed are kept and a retry with \
                     the same key resumes after them",
                );
                return (response, Outcome::Panicked);
            }
        };

        // Committed phases cannot be rolled back: a 5xx (or a transient 4xx such as 429)
        // leaves the key in progress at its recovery point, and frees the lease so the
        // client's retry resumes at once.
        if self.idem.is_transient(response.status()) {
            self.release(&attempt).await;
            return (response, Outcome::Resumable);
        }

        let (head, body_bytes, outcome) = match self
            .buffer_response(
                response,
                "its response was not recorded; the steps it completed are kept",
            )
            .await
        {
            Ok((head, body)) => (head, body, Outcome::Executed),
            // The phases committed and cannot be undone, and every retry would build the
            // same oversized answer and fail again, until the key is stranded. So the
            // problem is recorded as the key's answer: the key completes, and no retry
            // runs the handler again.
            Err(Unbuffered::TooLarge) => {
                let answer = self.too_large(
                    "the request was carried out, so this answer was recorded in its place, \
                     and every retry with this key gets it",
                );
                let (head, body) = answer.into_parts();
                // A problem document is a few hundred bytes, far below any stored limit.
                let body = actix_web::body::MessageBody::try_into_bytes(body).unwrap_or_default();
                (head, body, Outcome::TooLarge)
            }
            Err(Unbuffered::Failed(answer)) => {
                self.release(&attempt).await;
                return (answer, Outcome::RolledBack);
            }
        };
        let (status, stored_headers, stored_body) =
            self.seal_response(&claim, attempt.generation, &head, &body_bytes);
        let stored = StoredResponse {
            status,
            headers: &stored_headers,
            body: &stored_body,
        };
        let completed = async {
            let mut conn = self.idem.pool().acquire().await?;
            DB::complete_phased(&mut conn, &attempt.fenced(), &stored).await
        };
        let completed = timed(self.policy, "complete", completed).await;
        match completed {
            Ok(true) => (head.set_body(body_bytes).map_into_boxed_body(), outcome),
            Ok(false) => {
                tracing::warn!(
                    handler = self.policy.handler(),
                    "a retry took this attempt over before its response was recorded"
                );
                (
                    PhaseError::problem(PhaseErrorKind::TakenOver),
                    Outcome::TakenOver,
                )
            }
            Err(error) => {
                tracing::error!(%error, "could not record the response; the phases stay for a retry");
                self.release(&attempt).await;
                (
                    PhaseError::problem(PhaseErrorKind::Storage),
                    Outcome::StorageError,
                )
            }
        }
    }

    /// Frees the lease of a failed attempt; best effort, as the lease ends by itself.
    async fn release(&self, attempt: &Attempt) {
        let released = async {
            let mut conn = self.idem.pool().acquire().await?;
            DB::release_lease(&mut conn, &attempt.fenced()).await
        }
        .await;
        if let Err(error) = released {
            tracing::warn!(%error, "could not release the lease; a retry waits for it to run out");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::derive_key;

    #[test]
    fn derived_keys_are_uuids_stable_and_distinct() {
        let key = derive_key("1001", "k", 7, "charge");
        assert_eq!(key, derive_key("1001", "k", 7, "charge"));
        assert_eq!(key.len(), 36);
        assert_eq!(key.as_bytes()[14], b'8', "version 8: {key}");
        assert!(
            matches!(key.as_bytes()[19], b'8' | b'9' | b'a' | b'b'),
            "variant: {key}"
        );
        for other in [
            derive_key("2002", "k", 7, "charge"),
            derive_key("1001", "k2", 7, "charge"),
            derive_key("1001", "k", 8, "charge"),
            derive_key("1001", "k", 7, "refund"),
            // Length prefixes: moving a character across a boundary changes the key.
            derive_key("1001k", "", 7, "charge"),
        ] {
            assert_ne!(key, other);
        }
    }
}
