//! The end of a phased attempt, whichever store holds its key: how the handler's return
//! (or its panic, or idem's own failure) becomes the key's answer or its release.

use std::any::Any;

use super::error::Source;
use super::{Attempt, PhaseError, PhaseErrorKind};
use crate::protocol::config::Configured;
use crate::protocol::exchange::{Buffering, Done, Exchange};
use crate::protocol::framework::Framework;
use crate::protocol::headers::Headers;
use crate::protocol::metrics::timed;
use crate::protocol::outcome::Outcome;
use crate::protocol::problem::ProblemKind;
use crate::store::{ClaimRequest, OwnedResponse};

/// What the end of an attempt needs of the store that holds its key.
pub(crate) trait Holder {
    /// Frees the key after a failure; best effort, as the lease ends by itself.
    async fn release(&self);

    /// Records the answer, fenced by the attempt's token: `false` when a retry took the
    /// attempt over first, and nothing was written.
    async fn complete(&self, stored: OwnedResponse) -> Result<bool, Source>;
}

impl<C: Configured, W: Framework, H: Headers + ?Sized> Exchange<'_, C, W, H> {
    /// Ends `attempt` once its handler returned `result` (`Err`: it panicked): idem's
    /// problem when idem ended the attempt early, the release of the key after a panic or
    /// a transient answer, else the answer recorded through `holder` and sent.
    pub(crate) async fn finish_phased(
        &self,
        claim: &ClaimRequest<'_>,
        attempt: &Attempt,
        holder: &impl Holder,
        result: Result<W::Response, Box<dyn Any + Send>>,
    ) -> Done<W> {
        // A `Lease` the handler handed to a task of its own must stop extending now, or it
        // would hold off the retry that the released lease is meant to let in.
        let ended = attempt.ended();
        attempt.end(PhaseErrorKind::Finished, None, None);

        if let Some(kind) = ended {
            if kind != PhaseErrorKind::TakenOver {
                holder.release().await;
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
                holder.release().await;
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
        if self.idem.settings().is_transient(W::status(&response)) {
            holder.release().await;
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
                holder.release().await;
                return (answer, Outcome::RolledBack);
            }
        };
        let stored = self
            .seal_response(claim, attempt.generation, &head, &body)
            .into_owned(&body);
        match timed!(self.policy, "complete", holder.complete(stored)) {
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
                holder.release().await;
                let problem = PhaseError::problem(PhaseErrorKind::Storage);
                (W::problem(problem), Outcome::StorageError)
            }
        }
    }
}
