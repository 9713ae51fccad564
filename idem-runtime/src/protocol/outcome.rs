//! How idem answered a request: the `outcome` of the `idempotent` tracing span and the
//! label of the requests counter (see the table in the `metrics` module).

/// How idem answered a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The handler ran and its response was stored.
    Executed,
    /// A stored response was replayed.
    Replayed,
    /// 409: another request holds the key.
    InProgress,
    /// 503: SQLite's write lock stayed with other requests past `claim_wait`.
    Busy,
    /// 422: the key was used for a different request.
    Mismatch,
    /// 400: `Idempotency-Key` missing or malformed.
    InvalidKey,
    /// 400: a JSON body that does not parse.
    InvalidBody,
    /// 500: the response is larger than idem stores.
    TooLarge,
    /// The handler answered 5xx or a transient 4xx, or ended the transaction itself.
    RolledBack,
    /// The handler panicked.
    Panicked,
    /// The key store failed.
    StorageError,
    /// 500: the handler's configuration is refused (a signed webhook keyed by what the
    /// sender did not sign).
    Misconfigured,
    /// 500: a stored response does not decrypt.
    #[cfg(feature = "encryption")]
    Unreadable,
    /// Phased: the handler answered 5xx or a transient 4xx; its committed phases are kept.
    Resumable,
    /// Phased: a phase failed in idem's part of it.
    PhaseFailed,
    /// Phased: a retry took this attempt over.
    TakenOver,
}

impl Outcome {
    /// The label metrics and traces carry.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Executed => "executed",
            Self::Replayed => "replayed",
            Self::InProgress => "in_progress",
            Self::Busy => "busy",
            Self::Mismatch => "mismatch",
            Self::InvalidKey => "invalid_key",
            Self::InvalidBody => "invalid_body",
            Self::TooLarge => "too_large",
            Self::RolledBack => "rolled_back",
            Self::Panicked => "panicked",
            Self::StorageError => "storage_error",
            Self::Misconfigured => "misconfigured",
            #[cfg(feature = "encryption")]
            Self::Unreadable => "unreadable",
            Self::Resumable => "resumable",
            Self::PhaseFailed => "phase_failed",
            Self::TakenOver => "taken_over",
        }
    }
}
