//! The phased form's driver on Redis: claim with a lease (or take over), run the handler
//! with [`Steps`], and record its answer with a fenced script; the end of the attempt is
//! the relational form's (`phased::finish`).

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;

use super::{RedisIdem, Steps};
use crate::protocol::exchange::{Done, Exchange, answer, boxed, in_progress, instrumented};
use crate::protocol::framework::Framework;
use crate::protocol::headers::Headers;
use crate::protocol::metrics::timed;
use crate::protocol::outcome::Outcome;
use crate::protocol::phased::Attempt;
use crate::protocol::phased::error::Source;
use crate::protocol::phased::finish::Holder;
use crate::protocol::problem::{Problem, ProblemKind};
use crate::store::redis::{self as store, RedisClaim, RedisRequest, RedisStoreError};
use crate::store::{ClaimRequest, ExistingKey, OwnedResponse};

impl<W: Framework, H: Headers + ?Sized> Exchange<'_, RedisIdem, W, H> {
    /// The phased form with the key in Redis: claims it with a lease (or takes over an
    /// attempt whose lease ran out), runs the handler with [`Steps`], and records its
    /// answer; or replays, or answers the problem the protocol calls for.
    pub(crate) async fn run_steps<F>(self, scope: &str, lease: Duration, handler: F) -> W::Response
    where
        F: AsyncFnOnce(Steps) -> W::Response,
    {
        // Boxed and built in the box, as the relational forms are (see `instrumented`).
        instrumented::<W>(
            self.policy,
            boxed(|| self.run_steps_inner(scope, lease, handler)),
        )
        .await
    }

    async fn run_steps_inner<F>(&self, scope: &str, lease: Duration, handler: F) -> Done<W>
    where
        F: AsyncFnOnce(Steps) -> W::Response,
    {
        let identity = match self.identify(scope) {
            Ok(identity) => identity,
            Err(problem) => return answer::<W>(problem),
        };
        let settings = self.idem.settings();
        let claim = identity.claim(scope, self.policy.retention(), settings.claim_wait());
        let request = RedisRequest {
            scope: claim.scope,
            key: claim.key,
            fingerprint: claim.fingerprint,
            method: claim.method,
            path: claim.path,
            lease,
            retention: claim.retention,
        };
        let mut held = match self.claim_in_redis(&claim, &request).await {
            Ok(held) => held,
            Err(answer) => return answer,
        };

        let attempt = Arc::new(Attempt {
            scope: claim.scope.to_owned(),
            key: claim.key.to_owned(),
            generation: held.generation,
            fencing_token: held.fencing_token,
            lease,
            ended: Mutex::new(None),
        });
        // The recorded outputs go to the steps; the fenced writes need only the rest.
        let recorded = std::mem::take(&mut held.recorded);
        let steps = Steps::new(self.idem, Arc::clone(&attempt), held.clone(), recorded);
        let result = AssertUnwindSafe(handler(steps)).catch_unwind().await;
        let holder = InRedis {
            idem: self.idem,
            held: &held,
        };
        self.finish_phased(&claim, &attempt, &holder, result).await
    }

    /// Claims the key in Redis, or takes over an attempt whose lease ran out; or answers
    /// what holds it: a replay, 422, or 409 while a lease is live.
    async fn claim_in_redis(
        &self,
        claim: &ClaimRequest<'_>,
        request: &RedisRequest<'_>,
    ) -> Result<store::Attempt, Done<W>> {
        let store = self.idem.store();
        let claimed = timed!(self.policy, "claim", store.claim(request));
        match claimed.map_err(|error| answer::<W>(redis_failed(&error)))? {
            RedisClaim::Claimed(held) => Ok(held),
            RedisClaim::Completed(stored) => {
                let existing = ExistingKey {
                    fingerprint: Some(claim.fingerprint),
                    method: claim.method.to_owned(),
                    path: claim.path.to_owned(),
                    completed: true,
                    response_status: i16::try_from(stored.status).ok(),
                    response_headers: Some(stored.headers),
                    response_body: Some(stored.body),
                    generation: stored.generation,
                };
                Err(self.answer_existing(existing, claim))
            }
            // The script compared the fingerprint: one that differs under the same method
            // and path is a different body, which no stored fingerprint stands for.
            RedisClaim::Mismatch { method, path } => {
                let existing = ExistingKey {
                    fingerprint: None,
                    method,
                    path,
                    completed: false,
                    response_status: None,
                    response_headers: None,
                    response_body: None,
                    generation: 0,
                };
                Err(self.answer_existing(existing, claim))
            }
            RedisClaim::InFlight { .. } => Err(answer::<W>(in_progress())),
            RedisClaim::LeaseEnded { fencing_token } => {
                let taken = timed!(
                    self.policy,
                    "take_over",
                    store.take_over(request, fencing_token)
                );
                match taken.map_err(|error| answer::<W>(redis_failed(&error)))? {
                    Some(held) => {
                        crate::protocol::metrics::takeover(self.policy);
                        tracing::info!(
                            recovery_point = held.recovery_point.as_deref(),
                            "took over an attempt whose lease ran out"
                        );
                        Ok(held)
                    }
                    // Another retry took over first, or the holder came back.
                    None => Err(answer::<W>(in_progress())),
                }
            }
        }
    }
}

/// The attempt's key in Redis.
struct InRedis<'a> {
    idem: &'a RedisIdem,
    held: &'a store::Attempt,
}

impl Holder for InRedis<'_> {
    async fn release(&self) {
        // Whatever the store did (`Released`), the attempt is over; only a failure is news.
        if let Err(error) = self.idem.store().release(self.held).await {
            tracing::warn!(%error, "could not release the key; a retry waits for its lease to run out");
        }
    }

    async fn complete(&self, stored: OwnedResponse) -> Result<bool, Source> {
        let store = self.idem.store();
        let completed = store
            .complete(self.held, stored.status, &stored.headers, &stored.body)
            .await;
        completed.map_err(|error| Box::new(error) as Source)
    }
}

/// The answer to a failed call to Redis before the handler ran: 503 with `Retry-After`
/// when Redis could not answer (nothing ran, a retry may succeed), 500 for a value idem
/// did not write, which is never replayed.
fn redis_failed(error: &RedisStoreError) -> (Problem, Outcome) {
    if let RedisStoreError::Foreign { .. } = error {
        tracing::error!(%error, "the key's Redis record is not idem's; nothing was run");
        let problem = ProblemKind::KeyValueForeign.problem(
            "the key store holds a value under this key that the server did not write; \
             nothing was run; this is a server bug",
        );
        return (problem, Outcome::Misconfigured);
    }
    // A script's error or an unexpected reply is as unsafe to build on as a lost
    // connection: nothing ran, and a retry meets a server that may have recovered.
    tracing::error!(%error, "the Redis key store failed; nothing was run");
    let problem = ProblemKind::StorageUnavailable
        .problem("the request could not be completed and nothing was saved; it may be retried");
    (problem, Outcome::StorageError)
}
