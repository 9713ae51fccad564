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
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::protocol::config::Idem;
use crate::protocol::encryption;
use crate::protocol::tx::Tx;
use crate::store::choice::DefaultBackend;
use crate::store::{AttemptRef, AttemptRow, Backend, PhaseRecord};

mod derived;
mod driver;
pub(crate) mod error;
pub(crate) mod finish;
mod lease;
mod output;

pub(crate) use derived::derive_key;
pub use error::{PhaseError, PhaseErrorKind};
pub use lease::Lease;
pub use output::PhaseOutput;

/// The longest phase name, in bytes; names are stored beside each recorded output.
///
/// ```
/// assert!("payment_created".len() <= idem_runtime::phased::MAX_PHASE_NAME_LEN);
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
/// use idem_runtime::Phases;
/// use idem_runtime::phased::PhaseError;
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Payment {
///     id: i64,
/// }
///
/// // The handler's error type; actix-web's own `Error` takes a `PhaseError` too.
/// #[derive(Debug)]
/// enum PayError {
///     Idem(PhaseError),
///     Database(sqlx::Error),
/// }
///
/// impl From<PhaseError> for PayError {
///     fn from(error: PhaseError) -> Self {
///         Self::Idem(error)
///     }
/// }
///
/// // The body of a phased handler reads like straight-line code.
/// async fn pay(phases: &mut Phases<sqlx::Postgres>, amount: i64) -> Result<Payment, PayError> {
///     let payment: Payment = phases
///         .run("payment_created", async |mut tx| {
///             let id = sqlx::query_scalar("INSERT INTO payments (amount) VALUES ($1) RETURNING id")
///                 .bind(amount)
///                 .fetch_one(&mut *tx)
///                 .await
///                 .map_err(PayError::Database)?;
///             Ok::<_, PayError>(Payment { id })
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
///                 .map_err(PayError::Database)?;
///             Ok::<_, PayError>(())
///         })
///         .await?;
///     Ok(payment)
/// }
/// ```
///
/// Code outside phases runs again on every attempt, including takeovers: keep it to
/// computing the response from the phases' outputs. Side effects belong in phases, and
/// calls to other services take a [`derived_key`](Self::derived_key).
pub struct Phases<DB: crate::store::choice::ChosenBackend<'static> = DefaultBackend> {
    idem: Idem<DB>,
    attempt: Arc<Attempt>,
    /// Outputs of the phases committed before this attempt, by name.
    recorded: HashMap<String, String>,
    /// Names run in this attempt, to refuse a name used twice.
    ran: HashSet<String>,
    recovery_point: Option<String>,
}

/// One attempt at a phased key: what its writes are fenced by, and how it ended early.
pub(crate) struct Attempt {
    pub(super) scope: String,
    pub(super) key: String,
    pub(super) generation: i64,
    pub(super) fencing_token: i64,
    pub(super) lease: Duration,
    /// Set by the first failure that ends the attempt, or when the handler returned;
    /// every later call reports it.
    pub(super) ended: Mutex<Option<PhaseErrorKind>>,
}

impl Attempt {
    pub(super) fn fenced(&self) -> AttemptRef<'_> {
        AttemptRef {
            scope: &self.scope,
            key: &self.key,
            fencing_token: self.fencing_token,
            lease: self.lease,
        }
    }

    /// What the attempt's phase outputs are sealed to: its key row in its life.
    pub(super) fn row(&self) -> encryption::Row<'_> {
        encryption::Row {
            scope: &self.scope,
            key: &self.key,
            generation: self.generation,
            status: 0,
        }
    }

    pub(super) fn ended(&self) -> Option<PhaseErrorKind> {
        *self.ended.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ends the attempt (the first reason stands) and returns the error to hand back.
    pub(super) fn end(
        &self,
        kind: PhaseErrorKind,
        phase: Option<&str>,
        source: Option<error::Source>,
    ) -> PhaseError {
        let mut ended = self.ended.lock().unwrap_or_else(PoisonError::into_inner);
        let kind = *ended.get_or_insert(kind);
        PhaseError::new(kind, phase.map(str::to_owned), source)
    }
}

impl<DB: Backend> Phases<DB> {
    pub(super) fn new(idem: Idem<DB>, attempt: Arc<Attempt>, row: AttemptRow) -> Self {
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
    /// `phase` gets the phase's transaction ([`Tx`]); its `Ok` output, a [`PhaseOutput`]
    /// (any type that is `Serialize` and `Deserialize`), is serialized and recorded in that
    /// transaction together with the key's recovery point and a renewal of the lease, then
    /// the transaction commits. An `Err` rolls the phase back and is returned as it is: the
    /// handler decides what to answer (a 4xx is recorded and replayed like any final
    /// answer; a 5xx leaves the key to be resumed by a retry).
    ///
    /// idem's own failures come back as [`PhaseError`] converted into `E`. They end the
    /// attempt: later phases return the same error without running, and whatever the
    /// handler answers, the client gets idem's problem response instead (409 when a retry
    /// took the attempt over, 503 when the database failed).
    ///
    /// ```
    /// # async fn f(phases: &mut idem_runtime::Phases<sqlx::Postgres>) -> Result<(), idem_runtime::phased::PhaseError> {
    /// let id: i64 = phases
    ///     .run("created", async |mut tx| {
    ///         let id = sqlx::query_scalar("SELECT 42::int8").fetch_one(&mut *tx).await;
    ///         id.map_err(idem_runtime::phased::PhaseError::from)
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
        T: PhaseOutput,
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
            return Ok(recorded_output(
                self.idem.keyring(),
                &self.attempt,
                name,
                output,
            ));
        }
        self.run_new(name, phase)
            .instrument(tracing::debug_span!("phase", name))
            .await
    }

    async fn run_new<T, E, F>(&mut self, name: &str, phase: F) -> Result<T, E>
    where
        T: PhaseOutput,
        E: From<PhaseError>,
        F: for<'t> AsyncFnOnce(Tx<'t, DB>) -> Result<T, E>,
    {
        let attempt = &*self.attempt;
        let mut txn = match DB::begin_phase(self.idem.pool()).await {
            Ok(txn) => txn,
            Err(error) => {
                return Err(attempt
                    .end(PhaseErrorKind::Storage, Some(name), Some(error.into()))
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
        let json = encryption::seal_output(self.idem.keyring(), &attempt.row(), name, json);
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
        Err(attempt
            .end(ended.0, Some(name), ended.1.map(Into::into))
            .into())
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
    /// # async fn f(phases: &mut idem_runtime::Phases<sqlx::Postgres>) -> Result<(), idem_runtime::phased::PhaseError> {
    /// let lease = phases.lease();
    /// phases
    ///     .run("imported", async |tx| {
    ///         for _chunk in 0..3 {
    ///             // ... a slow step ...
    ///             lease.extend().await?;
    ///         }
    ///         # let _ = tx;
    ///         Ok::<_, idem_runtime::phased::PhaseError>(())
    ///     })
    ///     .await
    /// # }
    /// ```
    pub fn lease(&self) -> Lease<DB> {
        Lease::new(self.idem.clone(), Arc::clone(&self.attempt))
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

pub(super) fn check_phase_name(name: &str) {
    assert!(
        !name.is_empty() && name.len() <= MAX_PHASE_NAME_LEN,
        "idem: a phase name has 1 to {MAX_PHASE_NAME_LEN} bytes, not {}",
        name.len()
    );
}

/// The output an earlier attempt recorded for the phase `name`, opened and decoded.
pub(super) fn recorded_output<T: DeserializeOwned>(
    keyring: &encryption::KeyringSlot,
    attempt: &Attempt,
    name: &str,
    output: &str,
) -> T {
    tracing::debug!(
        phase = name,
        "phase committed by an earlier attempt; not run"
    );
    let output =
        encryption::open_output(keyring, &attempt.row(), name, output).unwrap_or_else(|reason| {
            // As an output that does not decode: the attempt fails with a 500 and keeps its
            // committed phases, and nothing is run twice.
            panic!("idem: the recorded output of phase `{name}` cannot be read: {reason}")
        });
    decode_output(name, &output)
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
