//! Why idem could not run or record a phase.

use std::fmt;

use crate::protocol::problem::{Problem, ProblemKind};

/// The key store's own error behind a [`PhaseError`]: the database's, or Redis's.
pub(crate) type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why idem could not run or record a phase. It ends the attempt.
///
/// Convert it into the handler's error type (`E: From<PhaseError>`); it implements
/// actix-web's `ResponseError`, so actix-web's `Error` accepts it as is. Whatever the handler then
/// answers, idem sends the client its own problem response for the kind: the attempt
/// can record nothing more.
///
/// ```
/// use idem_runtime::phased::{PhaseError, PhaseErrorKind};
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
    source: Option<Source>,
}

/// What ended a phased attempt.
///
/// ```
/// use idem_runtime::phased::{PhaseError, PhaseErrorKind};
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
    /// [`Lease`](super::Lease) kept past the handler (a heartbeat task) sees it; stop extending.
    Finished,
}

impl PhaseError {
    pub(super) fn new(kind: PhaseErrorKind, phase: Option<String>, source: Option<Source>) -> Self {
        Self {
            kind,
            phase,
            source,
        }
    }

    /// What went wrong.
    ///
    /// ```
    /// # fn f(error: &idem_runtime::phased::PhaseError) {
    /// if error.kind() == idem_runtime::phased::PhaseErrorKind::TakenOver {
    ///     tracing::info!("a retry took over; stopping");
    /// }
    /// # }
    /// ```
    pub fn kind(&self) -> PhaseErrorKind {
        self.kind
    }

    /// The phase it happened in, if it happened in one (not in [`Lease::extend`](super::Lease::extend)).
    ///
    /// ```
    /// # fn f(error: &idem_runtime::phased::PhaseError) {
    /// tracing::warn!(phase = error.phase(), %error, "payment not completed");
    /// # }
    /// ```
    pub fn phase(&self) -> Option<&str> {
        self.phase.as_deref()
    }

    /// The answer idem sends for an attempt ended by `kind`.
    pub(crate) fn problem(kind: PhaseErrorKind) -> Problem {
        match kind {
            PhaseErrorKind::TakenOver => ProblemKind::InProgress.problem(
                "this attempt's lease ran out and a retry took the request over; retry to \
                 get its outcome",
            ),
            PhaseErrorKind::Storage => ProblemKind::StorageUnavailable.problem(
                "the request could not be completed; the steps it completed are kept and a \
                 retry with the same key resumes after them",
            ),
            PhaseErrorKind::TransactionEnded => ProblemKind::TransactionEnded.problem(
                "the request failed; the steps it completed are kept and a retry with the \
                 same key resumes after them",
            ),
            PhaseErrorKind::TransactionAborted => ProblemKind::TransactionAborted.problem(
                "the request failed; the steps it completed are kept and a retry with the \
                 same key resumes after them",
            ),
            // Never answered by idem: it arises only after the handler returned.
            PhaseErrorKind::Finished => ProblemKind::InProgress
                .problem("this attempt is over; retry to get the request's outcome"),
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
            .as_deref()
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
            source: Some(Box::new(error)),
        }
    }
}
