//! The lease of a phased attempt, extended from inside a long phase.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{Attempt, PhaseError, PhaseErrorKind};
use crate::protocol::config::Idem;
use crate::store::Backend;
use crate::store::choice::DefaultBackend;

/// Extends the lease of a phased attempt; from [`Phases::lease`](super::Phases::lease).
///
/// ```
/// # async fn f(phases: &idem_runtime::Phases<sqlx::Postgres>) -> Result<(), idem_runtime::phased::PhaseError> {
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
pub struct Lease<DB: crate::store::choice::ChosenBackend<'static> = DefaultBackend> {
    idem: Idem<DB>,
    attempt: Arc<Attempt>,
}

impl<DB: Backend> Lease<DB> {
    pub(super) fn new(idem: Idem<DB>, attempt: Arc<Attempt>) -> Self {
        Self { idem, attempt }
    }

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
    /// # async fn f(lease: &idem_runtime::phased::Lease<sqlx::Postgres>) -> Result<(), idem_runtime::phased::PhaseError> {
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
            Err(error) => Err(attempt.end(PhaseErrorKind::Storage, None, Some(error.into()))),
        }
    }

    /// How long one extension (and each phase's renewal) holds the key: the handler's
    /// `lease` argument.
    ///
    /// ```
    /// # fn f(lease: &idem_runtime::phased::Lease<sqlx::Postgres>) {
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
