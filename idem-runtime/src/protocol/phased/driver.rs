//! The phased form's driver: claim with a lease (or take over), run the handler with
//! [`Phases`], and record its response with a fenced write.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;

use super::{Attempt, PhaseError, PhaseErrorKind, Phases};
use crate::protocol::exchange::{
    Buffering, Done, Exchange, answer, boxed, in_progress, instrumented, mismatched,
    storage_unavailable,
};
use crate::protocol::framework::Framework;
use crate::protocol::headers::Headers;
use crate::protocol::metrics::timed;
use crate::protocol::outcome::Outcome;
use crate::protocol::problem::ProblemKind;
use crate::store::{AttemptRow, Backend, ClaimRequest, PhasedClaim};

impl<DB: Backend, W: Framework, H: Headers + ?Sized> Exchange<'_, DB, W, H> {
    /// The phased form: claims the key with a lease (or takes over an attempt whose lease
    /// ran out), runs the handler with [`Phases`], and records its response; or replays,
    /// or answers the problem the protocol calls for.
    pub(crate) async fn run_phased<F>(self, scope: &str, lease: Duration, handler: F) -> W::Response
    where
        F: AsyncFnOnce(Phases<DB>) -> W::Response,
    {
        // Boxed, so the framework moves a pointer (see `instrumented`), and built in the
        // box (see `boxed`).
        instrumented::<W>(
            self.policy,
            boxed(|| self.run_phased_inner(scope, lease, handler)),
        )
        .await
    }

    async fn run_phased_inner<F>(&self, scope: &str, lease: Duration, handler: F) -> Done<W>
    where
        F: AsyncFnOnce(Phases<DB>) -> W::Response,
    {
        let identity = match self.identify(scope) {
            Ok(identity) => identity,
            Err(problem) => return answer::<W>(problem),
        };
        let settings = self.idem.settings();
        let claim = identity.claim(scope, self.policy.retention(), settings.claim_wait());
        let row = match self.claim_phased(&claim, lease).await {
            Ok(row) => row,
            Err(answer) => return answer,
        };

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
            return (W::problem(PhaseError::problem(kind)), outcome);
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
                let problem = ProblemKind::HandlerPanicked.problem(
                    "the request failed; the steps it completed are kept and a retry with \
                     the same key resumes after them",
                );
                return (W::problem(problem), Outcome::Panicked);
            }
        };

        // Committed phases cannot be rolled back: a 5xx (or a transient 4xx such as 429)
        // leaves the key in progress at its recovery point, and frees the lease so the
        // client's retry resumes at once.
        if settings.is_transient(W::status(&response)) {
            self.release(&attempt).await;
            return (response, Outcome::Resumable);
        }

        let consequence = "its response was not recorded; the steps it completed are kept";
        let (head, body, outcome) = match self.buffer_response(response, consequence).await {
            Ok((head, body)) => (head, body, Outcome::Executed),
            // The phases committed and cannot be undone, and every retry would build the
            // same oversized answer and fail again, until the key is stranded. So the
            // problem is recorded as the key's answer: the key completes, and no retry
            // runs the handler again.
            Err(Buffering::TooLarge) => {
                let problem = self.too_large(
                    "the request was carried out, so this answer was recorded in its place, \
                     and every retry with this key gets it",
                );
                // A problem document is a few hundred bytes, far below any stored limit.
                let (head, body) = W::problem_parts(problem);
                (head, body, Outcome::TooLarge)
            }
            Err(Buffering::Failed(answer)) => {
                self.release(&attempt).await;
                return (answer, Outcome::RolledBack);
            }
        };
        let stored = self
            .seal_response(&claim, attempt.generation, &head, &body)
            .into_owned(&body);
        let fenced = attempt.fenced();
        let completed = DB::complete_phased_shielded(self.idem.pool(), &fenced, stored);
        match timed!(self.policy, "complete", completed) {
            Ok(true) => (W::assemble(head, body), outcome),
            Ok(false) => {
                tracing::warn!(
                    handler = self.policy.handler(),
                    "a retry took this attempt over before its response was recorded"
                );
                let problem = PhaseError::problem(PhaseErrorKind::TakenOver);
                (W::problem(problem), Outcome::TakenOver)
            }
            Err(error) => {
                tracing::error!(%error, "could not record the response; the phases stay for a retry");
                self.release(&attempt).await;
                let problem = PhaseError::problem(PhaseErrorKind::Storage);
                (W::problem(problem), Outcome::StorageError)
            }
        }
    }

    /// Claims the key with a lease, or takes over an attempt whose lease ran out, and
    /// commits the claim on its own, before any phase: the lease is what keeps duplicates
    /// out from here on, not an open transaction. Or answers the key's holder's outcome.
    async fn claim_phased(
        &self,
        claim: &ClaimRequest<'_>,
        lease: Duration,
    ) -> Result<AttemptRow, Done<W>> {
        let conn = self.connection(claim, true).await?;
        let mut txn = self.begin(conn, claim, true).await?;
        let row = match timed!(
            self.policy,
            "claim",
            DB::claim_phased(&mut txn, claim, lease)
        ) {
            Ok(PhasedClaim::Claimed(row)) => row,
            Ok(PhasedClaim::Existing {
                key,
                lease_expired,
                fencing_token,
            }) => {
                if let Some(mismatch) = mismatched(&key, claim, self.policy.key_source()) {
                    let _ = txn.rollback().await;
                    return Err(answer::<W>(mismatch));
                }
                if key.completed || !lease_expired {
                    let _ = txn.rollback().await;
                    return Err(self.answer_existing(key, claim));
                }
                match timed!(
                    self.policy,
                    "take_over",
                    DB::take_over(&mut txn, claim, fencing_token, lease)
                ) {
                    Ok(Some(row)) => {
                        crate::protocol::metrics::takeover(self.policy);
                        tracing::info!(
                            recovery_point = row.recovery_point.as_deref(),
                            "took over an attempt whose lease ran out"
                        );
                        row
                    }
                    // Another retry took over first, or the holder renewed its lease.
                    Ok(None) => return Err(answer::<W>(in_progress())),
                    Err(error) if DB::is_lock_timeout(&error) => {
                        return Err(answer::<W>(in_progress()));
                    }
                    Err(error) => return Err(answer::<W>(storage_unavailable(&error))),
                }
            }
            Ok(PhasedClaim::Vanished) => return Err(answer::<W>(in_progress())),
            Err(error) if DB::is_lock_timeout(&error) => return Err(answer::<W>(in_progress())),
            Err(error) => return Err(answer::<W>(storage_unavailable(&error))),
        };
        if let Err(error) = timed!(self.policy, "commit", txn.commit()) {
            return Err(answer::<W>(storage_unavailable(&error)));
        }
        Ok(row)
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
