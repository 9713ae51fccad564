//! The single-transaction form: claim the key, run the handler and record its response
//! in one transaction, behind every `#[idempotent]` handler without a `lease`.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use bytes::Bytes;
use futures_util::FutureExt;
use http::HeaderName;
use sqlx::Transaction;

use crate::protocol::config::Idem;
use crate::protocol::exchange::{
    Buffering, Done, Exchange, answer, boxed, in_progress, instrumented, storage_unavailable,
};
use crate::protocol::framework::Framework;
use crate::protocol::headers::Headers;
use crate::protocol::in_flight::Held;
use crate::protocol::metrics::timed;
use crate::protocol::outcome::Outcome;
use crate::protocol::problem::{Problem, ProblemKind};
#[cfg(feature = "axum")]
use crate::protocol::tx::LentTx;
use crate::protocol::tx::Tx;
use crate::store::{Backend, Claim, ClaimFailed, ClaimRequest, Completion};

/// Header added to every replayed response.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

impl<DB: Backend, W: Framework, H: Headers + ?Sized> Exchange<'_, Idem<DB>, W, H> {
    /// Claims the key, runs `handler` in the transaction, records its response and
    /// commits; or replays, or answers the problem the protocol calls for.
    pub(crate) async fn run<F>(self, scope: &str, handler: F) -> W::Response
    where
        F: for<'t> AsyncFnOnce(Tx<'t, DB>) -> W::Response,
    {
        // Boxed, so the framework moves a pointer (see `instrumented`), and built in the
        // box (see `boxed`).
        instrumented::<W>(self.policy, boxed(|| self.run_inner(scope, handler))).await
    }

    async fn run_inner<F>(&self, scope: &str, handler: F) -> Done<W>
    where
        F: for<'t> AsyncFnOnce(Tx<'t, DB>) -> W::Response,
    {
        let identity = match self.identify(scope) {
            Ok(identity) => identity,
            Err(problem) => return answer::<W>(problem),
        };
        let settings = self.idem.settings();
        let claim = identity.claim(scope, self.policy.retention(), settings.claim_wait());
        // `_held` lives until `record` has ended the transaction (or dropped it, which
        // queues its rollback): the key is announced as held as long as it is.
        let (mut txn, generation, _held) = match self.claim_key(&claim).await {
            Ok(claimed) => claimed,
            Err(answer) => return answer,
        };
        let response = match self.guarded(handler(Tx::new(&mut *txn))).await {
            Ok(response) => response,
            Err(answer) => return answer,
        };
        self.record(&claim, txn, generation, response).await
    }

    /// The same as [`run`](Self::run) for a handler that is a service of its own (axum's
    /// `IdempotencyLayer`), which cannot borrow the transaction: it is lent to `handler` in
    /// a [`LentTx`], and taken back once `handler` has answered to record its answer.
    #[cfg(feature = "axum")]
    pub(crate) async fn run_lent<F>(self, scope: &str, handler: F) -> W::Response
    where
        F: AsyncFnOnce(LentTx<DB>) -> W::Response,
    {
        // Boxed, so the framework moves a pointer (see `instrumented`), and built in the
        // box (see `boxed`).
        instrumented::<W>(self.policy, boxed(|| self.run_lent_inner(scope, handler))).await
    }

    #[cfg(feature = "axum")]
    async fn run_lent_inner<F>(&self, scope: &str, handler: F) -> Done<W>
    where
        F: AsyncFnOnce(LentTx<DB>) -> W::Response,
    {
        let identity = match self.identify(scope) {
            Ok(identity) => identity,
            Err(problem) => return answer::<W>(problem),
        };
        let settings = self.idem.settings();
        let claim = identity.claim(scope, self.policy.retention(), settings.claim_wait());
        let (txn, generation, _held) = match self.claim_key(&claim).await {
            Ok(claimed) => claimed,
            Err(answer) => return answer,
        };
        let slot = LentTx::new(txn);
        let response = match self.guarded(handler(slot.clone())).await {
            Ok(response) => response,
            Err(answer) => return answer,
        };
        let Some(txn) = slot.take_back() else {
            // Something of the handler's (a spawned task, the response's body) still holds
            // its `Tx`: its writes cannot be committed with the key. The last holder's drop
            // rolls them back.
            tracing::error!(
                handler = self.policy.handler(),
                "the handler kept idem::Tx after it answered; rolled back"
            );
            let problem = ProblemKind::TransactionEnded
                .problem("the request failed and nothing was saved; it may be retried");
            return (W::problem(problem), Outcome::RolledBack);
        };
        self.record(&claim, txn, generation, response).await
    }

    /// Claims the key in a new transaction: the transaction, the key row's life and, on
    /// a backend with one writer, the key announced as held by this process. Or the answer
    /// (a replay, 409, 422, 503) when the key cannot be claimed.
    async fn claim_key(
        &self,
        claim: &ClaimRequest<'_>,
    ) -> Result<(Transaction<'static, DB>, i64, Option<Held>), Done<W>> {
        let conn = self.connection(claim, false).await?;
        let claimed = if DB::CLAIMS_WITH_BEGIN {
            let claimed = DB::begin_claim(conn, self.idem.opening(), claim);
            timed!(self.policy, "claim", claimed)
        } else {
            let mut txn = self.begin(conn, claim, false).await?;
            match timed!(self.policy, "claim", DB::claim(&mut txn, claim)) {
                Ok(claimed) => Ok((txn, claimed)),
                Err(error) => Err(ClaimFailed::Claim(error)),
            }
        };
        match claimed {
            Ok((txn, Claim::Claimed { generation })) => {
                let held = DB::ONE_WRITER.then(|| self.idem.in_flight().hold(claim));
                Ok((txn, generation, held))
            }
            Ok((txn, Claim::Existing(existing))) => {
                // Nothing was written. Dropping the transaction queues its ROLLBACK, which
                // sqlx sends with the ping it makes when the connection returns to the
                // pool: one round trip fewer on the request's path.
                drop(txn);
                Err(self.answer_existing(existing, claim))
            }
            Ok((_, Claim::Vanished)) => Err(answer::<W>(in_progress())),
            Err(ClaimFailed::Begin(error)) => Err(self.begin_failed(&error, claim, false).await),
            Err(ClaimFailed::Claim(error)) if DB::is_lock_timeout(&error) => {
                Err(answer::<W>(in_progress()))
            }
            Err(ClaimFailed::Claim(error)) => Err(answer::<W>(storage_unavailable(&error))),
        }
    }

    /// Runs the handler's future; a panic in it is answered 500, and what it wrote rolls
    /// back with its transaction.
    async fn guarded(
        &self,
        run: impl Future<Output = W::Response>,
    ) -> Result<W::Response, Done<W>> {
        match AssertUnwindSafe(run).catch_unwind().await {
            Ok(response) => Ok(response),
            Err(_) => {
                // The panic message was already printed by the panic hook; dropping the
                // transaction rolls it back.
                tracing::error!(
                    handler = self.policy.handler(),
                    "handler panicked; rolled back"
                );
                let problem = ProblemKind::HandlerPanicked
                    .problem("the request failed and nothing was saved; it may be retried");
                Err((W::problem(problem), Outcome::Panicked))
            }
        }
    }

    /// Records the handler's `response` with its writes and commits, or rolls back what a
    /// 5xx, a transient 4xx or an unstorable response must not keep.
    async fn record(
        &self,
        claim: &ClaimRequest<'_>,
        txn: Transaction<'static, DB>,
        generation: i64,
        response: W::Response,
    ) -> Done<W> {
        let settings = self.idem.settings();
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
        let stored = self
            .seal_response(claim, generation, &head, &body)
            .into_owned(&body);
        let status = stored.status;
        let (txn, completed) = timed!(
            self.policy,
            "complete",
            DB::complete_shielded(txn, claim, stored)
        );
        let outcome = match completed {
            Ok(Completion::Recorded) => match timed!(self.policy, "commit", txn.commit()) {
                Ok(()) => Outcome::Executed,
                Err(error) if DB::is_no_transaction(&error) => {
                    self.committed_by_handler();
                    Outcome::Executed
                }
                Err(error) => {
                    return (
                        W::problem(commit_failed::<DB>(&error)),
                        Outcome::StorageError,
                    );
                }
            },
            Ok(Completion::OutsideTransaction) => {
                self.committed_by_handler();
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
                if !(400..500).contains(&status) {
                    tracing::error!(
                        handler = self.policy.handler(),
                        status,
                        "the handler answered success after one of its statements failed; \
                         its writes were lost, so the request was rolled back"
                    );
                    let problem = ProblemKind::TransactionAborted
                        .problem("the request failed and nothing was saved; it may be retried");
                    return (W::problem(problem), Outcome::RolledBack);
                }
                if let Err(error) = self.record_without_effects(claim, &head, &body).await {
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
        let conn = self.idem.pool().acquire().await?;
        let (txn, claimed) = DB::begin_claim(conn, self.idem.opening(), claim)
            .await
            .map_err(|(ClaimFailed::Begin(error) | ClaimFailed::Claim(error))| error)?;
        if let Claim::Claimed { generation } = claimed {
            let stored = self
                .seal_response(claim, generation, head, body)
                .into_owned(body);
            let (txn, completed) = DB::complete_shielded(txn, claim, stored).await;
            completed?;
            txn.commit().await?;
        }
        Ok(())
    }

    /// Logs a handler that committed idem's transaction itself. Its writes were durable
    /// at its COMMIT and the key is recorded too, so retries replay; atomicity was lost in
    /// between.
    fn committed_by_handler(&self) {
        tracing::error!(
            handler = self.policy.handler(),
            "the handler committed idem's transaction itself; never end it by hand"
        );
    }
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
