//! The phased form's driver: claim with a lease (or take over), run the handler with
//! [`Phases`], and record its response with a fenced write.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;

use super::error::Source;
use super::finish::Holder;
use super::{Attempt, Phases};
use crate::protocol::config::Idem;
use crate::protocol::exchange::{
    Done, Exchange, answer, boxed, in_progress, instrumented, mismatched, storage_unavailable,
};
use crate::protocol::framework::Framework;
use crate::protocol::headers::Headers;
use crate::protocol::metrics::timed;
use crate::store::{AttemptRow, Backend, ClaimRequest, OwnedResponse, PhasedClaim};

impl<DB: Backend, W: Framework, H: Headers + ?Sized> Exchange<'_, Idem<DB>, W, H> {
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
        let holder = InDatabase {
            idem: self.idem,
            attempt: &attempt,
        };
        self.finish_phased(&claim, &attempt, &holder, result).await
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
}

/// The attempt's key in the relational database.
struct InDatabase<'a, DB: Backend> {
    idem: &'a Idem<DB>,
    attempt: &'a Attempt,
}

impl<DB: Backend> Holder for InDatabase<'_, DB> {
    async fn release(&self) {
        let released = async {
            let mut conn = self.idem.pool().acquire().await?;
            DB::release_lease(&mut conn, &self.attempt.fenced()).await
        }
        .await;
        if let Err(error) = released {
            tracing::warn!(%error, "could not release the lease; a retry waits for it to run out");
        }
    }

    async fn complete(&self, stored: OwnedResponse) -> Result<bool, Source> {
        let fenced = self.attempt.fenced();
        DB::complete_phased_shielded(self.idem.pool(), &fenced, stored)
            .await
            .map_err(Into::into)
    }
}
