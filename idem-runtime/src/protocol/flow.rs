//! The single-transaction form: claim the key, run the handler and record its response
//! in one transaction, behind every `#[idempotent]` handler without a `lease`.

use std::panic::AssertUnwindSafe;

use bytes::Bytes;
use futures_util::FutureExt;
use http::HeaderName;

use crate::protocol::exchange::{
    Buffering, Done, Exchange, answer, in_progress, instrumented, storage_unavailable,
};
use crate::protocol::framework::Framework;
use crate::protocol::headers::Headers;
use crate::protocol::metrics::timed;
use crate::protocol::outcome::Outcome;
use crate::protocol::problem::{Problem, ProblemKind};
use crate::protocol::tx::Tx;
use crate::store::{Backend, Claim, ClaimRequest, Completion, StoredResponse};

/// Header added to every replayed response.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

impl<DB: Backend, W: Framework, H: Headers + ?Sized> Exchange<'_, DB, W, H> {
    /// Claims the key, runs `handler` in the transaction, records its response and
    /// commits; or replays, or answers the problem the protocol calls for.
    pub(crate) async fn run<F>(self, scope: &str, handler: F) -> W::Response
    where
        F: for<'t> AsyncFnOnce(Tx<'t, DB>) -> W::Response,
    {
        instrumented::<W>(self.policy, self.run_inner(scope, handler)).await
    }

    async fn run_inner<F>(&self, scope: &str, handler: F) -> Done<W>
    where
        F: for<'t> AsyncFnOnce(Tx<'t, DB>) -> W::Response,
    {
        let identity = match self.identify() {
            Ok(identity) => identity,
            Err(problem) => return answer::<W>(problem),
        };
        let settings = self.idem.settings();
        let claim = identity.claim(scope, self.policy.retention(), settings.claim_wait());
        if let Some(answer) = self.answer_from_read(&claim, false).await {
            return answer;
        }

        let mut txn = match self.begin(&claim).await {
            Ok(txn) => txn,
            Err(answer) => return answer,
        };
        // Declared after `txn`, so dropped before it; the key is announced as held until
        // idem's transaction ended (or, when dropped, its rollback is queued).
        let (generation, _held) =
            match timed(self.policy, "claim", DB::claim(&mut txn, &claim)).await {
                Ok(Claim::Claimed { generation }) => (
                    generation,
                    DB::ONE_WRITER.then(|| self.idem.in_flight().hold(&claim)),
                ),
                Ok(Claim::Existing(existing)) => {
                    // Nothing was written. Dropping the transaction queues its ROLLBACK, which
                    // sqlx sends with the ping it makes when the connection returns to the
                    // pool: one round trip fewer on the request's path.
                    drop(txn);
                    return self.answer_existing(existing, &claim);
                }
                Ok(Claim::Vanished) => return answer::<W>(in_progress()),
                Err(error) if DB::is_lock_timeout(&error) => return answer::<W>(in_progress()),
                Err(error) => return answer::<W>(storage_unavailable(&error)),
            };

        let response = match AssertUnwindSafe(handler(Tx::new(&mut *txn)))
            .catch_unwind()
            .await
        {
            Ok(response) => response,
            Err(_) => {
                // The panic message was already printed by the panic hook; dropping the
                // transaction rolls it back.
                tracing::error!(
                    handler = self.policy.handler(),
                    "handler panicked; rolled back"
                );
                let problem = ProblemKind::HandlerPanicked
                    .problem("the request failed and nothing was saved; it may be retried");
                return (W::problem(problem), Outcome::Panicked);
            }
        };

        // A 5xx, or a transient 4xx such as 429, is not an outcome to replay: roll back so
        // the client can retry the key.
        if settings.is_transient(W::status(&response)) {
            let _ = txn.rollback().await;
            return (response, Outcome::RolledBack);
        }

        let (head, body) = match self.buffer_response(response, "nothing was saved").await {
            Ok(parts) => parts,
            Err(Buffering::TooLarge) => {
                let problem = self.too_large("nothing was saved");
                return (W::problem(problem), Outcome::TooLarge);
            }
            Err(Buffering::Failed(answer)) => return (answer, Outcome::RolledBack),
        };
        let sealed = self.seal_response(&claim, generation, &head, &body);
        let stored = sealed.stored();
        let complete = DB::complete(&mut txn, &claim, &stored);
        let outcome = match timed(self.policy, "complete", complete).await {
            Ok(Completion::Recorded) => match timed(self.policy, "commit", txn.commit()).await {
                Ok(()) => Outcome::Executed,
                Err(error) => {
                    return (
                        W::problem(commit_failed::<DB>(&error)),
                        Outcome::StorageError,
                    );
                }
            },
            Ok(Completion::OutsideTransaction) => {
                // The handler's COMMIT already made its writes durable; the key is now
                // recorded too, so retries replay. Atomicity was lost in between.
                tracing::error!(
                    handler = self.policy.handler(),
                    "the handler committed idem's transaction itself; never end it by hand"
                );
                Outcome::Executed
            }
            Ok(Completion::RowGone) => {
                tracing::error!(
                    handler = self.policy.handler(),
                    "the handler rolled back idem's transaction itself; nothing was saved"
                );
                let problem = ProblemKind::TransactionEnded
                    .problem("the request failed and nothing was saved; it may be retried");
                return (W::problem(problem), Outcome::RolledBack);
            }
            Err(error) if DB::is_aborted_transaction(&error) => {
                // A statement of the handler failed and it answered anyway. Nothing it
                // wrote survives, so only a 4xx (an outcome without effects) is kept.
                let _ = txn.rollback().await;
                if !stored_status_is_client_error(&stored) {
                    tracing::error!(
                        handler = self.policy.handler(),
                        status = stored.status,
                        "the handler answered success after one of its statements failed; \
                         its writes were lost, so the request was rolled back"
                    );
                    let problem = ProblemKind::TransactionAborted
                        .problem("the request failed and nothing was saved; it may be retried");
                    return (W::problem(problem), Outcome::RolledBack);
                }
                if let Err(error) = self.record_without_effects(&claim, &head, &body).await {
                    // The answer is still right; a retry re-runs the handler instead.
                    tracing::warn!(%error, "could not store a 4xx answered after a failed statement");
                }
                Outcome::Executed
            }
            Err(error) => return answer::<W>(storage_unavailable(&error)),
        };
        (W::assemble(head, body), outcome)
    }

    /// Stores a response whose handler transaction was aborted, in a transaction of its
    /// own: the key row alone, since no business write survived. If another request has
    /// claimed the key meanwhile, that one's outcome stands and nothing is stored.
    ///
    /// The claim begins a new life of the key (the first one rolled back), so the
    /// response is sealed again, to it.
    async fn record_without_effects(
        &self,
        claim: &ClaimRequest<'_>,
        head: &W::Head,
        body: &Bytes,
    ) -> Result<(), sqlx::Error> {
        let mut txn = DB::begin(self.idem.pool(), self.idem.opening()).await?;
        if let Claim::Claimed { generation } = DB::claim(&mut txn, claim).await? {
            let sealed = self.seal_response(claim, generation, head, body);
            DB::complete(&mut txn, claim, &sealed.stored()).await?;
            txn.commit().await?;
        }
        Ok(())
    }
}

fn stored_status_is_client_error(stored: &StoredResponse<'_>) -> bool {
    (400..500).contains(&stored.status)
}

/// The answer to a COMMIT that failed: nothing was saved when the database refused it,
/// but when its answer was lost the transaction may have committed.
fn commit_failed<DB: Backend>(error: &sqlx::Error) -> Problem {
    if DB::is_definite_rollback(error) {
        return storage_unavailable(error).0;
    }
    tracing::error!(%error, "the COMMIT went unanswered; its outcome is unknown");
    ProblemKind::StorageUnavailable.problem(
        "the database did not confirm the commit, so the request may or may not have been \
         saved; retrying with the same Idempotency-Key is safe and returns its outcome",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The database refused the COMMIT: rolled back. Its answer was lost: unknown.
    #[test]
    fn a_failed_commit_says_what_is_known_of_its_outcome() {
        use crate::store::choice::AnyBackend as DefaultBackend;

        let detail = |problem: Problem| {
            let value: serde_json::Value =
                serde_json::from_slice(&problem.into_body()).expect("JSON");
            value["detail"].as_str().expect("a detail").to_owned()
        };
        let lost = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let unknown = detail(commit_failed::<DefaultBackend>(&lost));
        assert!(
            unknown.contains("may or may not have been saved"),
            "{unknown}"
        );
        assert!(
            unknown.contains("same Idempotency-Key is safe"),
            "{unknown}"
        );
    }
}
