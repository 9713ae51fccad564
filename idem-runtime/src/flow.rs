//! The claim / execute / record flow behind every `#[idempotent]` handler.

use std::borrow::Cow;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix_web::body::{self, BodyLimitExceeded, BoxBody};
use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_LENGTH, HeaderMap, HeaderName, HeaderValue};
use actix_web::web::{self, Bytes};
use actix_web::{FromRequest, HttpRequest, HttpResponse, Responder};
use futures_util::FutureExt;
use serde_json::{Map, Value};
use tracing::Instrument;

use crate::decode::{self, DecodeError};
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::metrics::timed;
use crate::outcome::Outcome;
use crate::policy::Policy;
use crate::problem::ProblemKind;
use crate::store::{Backend, Claim, ClaimRequest, Completion, ExistingKey, StoredResponse};
use crate::{Idem, Tx};

/// Header added to every replayed response.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// A request whose key is valid and whose body is read, before any extractor ran.
#[doc(hidden)]
#[derive(Debug)]
pub struct Prepared<DB: Backend> {
    pub(crate) idem: Idem<DB>,
    pub(crate) policy: &'static Policy,
    pub(crate) req: HttpRequest,
    /// The body as sent, for the extractors, which decode it themselves.
    pub(crate) body: Bytes,
    /// The body decoded from its `Content-Encoding`, for the fingerprint: what the
    /// extractors read. The same bytes as `body` when nothing is to be decoded.
    pub(crate) content: Bytes,
}

/// What identifies a request to the key store: its key, method, target (the path and the
/// canonical query, see [`Fingerprint::canonical_target`]) and fingerprint.
pub(crate) struct Identity<'a> {
    pub(crate) key: IdempotencyKey,
    pub(crate) method: &'a str,
    pub(crate) path: Cow<'a, str>,
    pub(crate) fingerprint: Fingerprint,
}

impl Identity<'_> {
    pub(crate) fn claim<'a>(
        &'a self,
        scope: &'a str,
        retention: Duration,
        claim_wait: Duration,
    ) -> ClaimRequest<'a> {
        ClaimRequest {
            scope,
            key: self.key.as_str(),
            fingerprint: *self.fingerprint.as_bytes(),
            method: self.method,
            path: &self.path,
            retention,
            claim_wait,
        }
    }
}

/// Buffers the body (413 past the limit) so each extractor can read it, and decodes its
/// `Content-Encoding` for the fingerprint (413 when the decoded content is past the limit,
/// 400 when it does not decode), before any extractor could inflate it unbounded. The key
/// is checked after the extractors, so that e.g. an unauthenticated request gets the
/// application's 401 rather than a 400 about its key.
#[doc(hidden)]
pub async fn prepare<DB: Backend>(
    policy: &'static Policy,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<Prepared<DB>, HttpResponse> {
    let Some(idem) = Idem::<DB>::from_request(&req).cloned() else {
        tracing::error!(
            handler = policy.handler(),
            "idem is not configured: register it with App::app_data(idem::Idem::new(pool))"
        );
        return Err(ProblemKind::NotConfigured
            .response("the server has no idempotency store configured; this is a server bug"));
    };
    let limit = idem.request_limit();
    let too_large = || {
        ProblemKind::BodyTooLarge.response(format!(
            "the request body is larger than the {limit} bytes this endpoint accepts"
        ))
    };
    // Refuse a declared oversize body before reading a byte of it.
    if declared_length(req.headers()).is_some_and(|len| len > limit) {
        return Err(too_large());
    }
    let body = match payload.to_bytes_limited(limit).await {
        Ok(Ok(body)) => body,
        Ok(Err(error)) => return Err(error.error_response()),
        Err(BodyLimitExceeded { .. }) => return Err(too_large()),
    };
    let content = match decode::content(req.headers(), &body, limit) {
        Ok(content) => content,
        Err(DecodeError::TooLarge) => return Err(too_large()),
        Err(DecodeError::Invalid { encoding, error }) => {
            return Err(ProblemKind::EncodingInvalid.response(format!(
                "the request body is not valid `{encoding}` data, as its Content-Encoding \
                 says: {error}"
            )));
        }
    };
    crate::webhook::keep_raw_body(&req, &body);
    Ok(Prepared {
        idem,
        policy,
        req,
        body,
        content,
    })
}

fn declared_length(headers: &HeaderMap) -> Option<usize> {
    headers.get(CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// Runs one of the handler's extractors over the buffered body, in declaration order.
/// A failure is answered with the extractor's own error response, before any claim.
#[doc(hidden)]
pub async fn extract<T: FromRequest>(
    req: &HttpRequest,
    payload: &mut Payload,
) -> Result<T, HttpResponse> {
    T::from_request(req, payload)
        .await
        .map_err(|error| HttpResponse::from_error(error.into()))
}

/// Converts the handler's return value while the request is at hand.
#[doc(hidden)]
pub fn respond<R: Responder>(value: R, req: &HttpRequest) -> HttpResponse {
    value.respond_to(req).map_into_boxed_body()
}

impl<DB: Backend> Prepared<DB> {
    /// The request, for the handler's extractors.
    pub fn request(&self) -> &HttpRequest {
        &self.req
    }

    /// A fresh payload over the buffered body as sent: extractors decode it as they
    /// would without idem, into the content that is fingerprinted.
    pub fn payload(&self) -> Payload {
        Payload::from(self.body.clone())
    }

    /// Claims the key, runs `handler` in the transaction, records its response and
    /// commits; or replays, or answers the problem the protocol calls for.
    pub async fn run<F>(self, scope: &str, handler: F) -> HttpResponse
    where
        F: for<'t> AsyncFnOnce(Tx<'t, DB>) -> HttpResponse,
    {
        let span = tracing::debug_span!(
            "idempotent",
            handler = self.policy.handler(),
            outcome = tracing::field::Empty,
        );
        let policy = self.policy;
        let (response, outcome) = self
            .run_inner(scope, handler)
            .instrument(span.clone())
            .await;
        span.record("outcome", outcome.as_str());
        crate::metrics::outcome(policy, outcome);
        crate::webhook::after(policy, outcome);
        response
    }

    /// Reads the key and fingerprints the request, or answers why it cannot.
    // The error is the request's final answer, built once and returned straight to actix:
    // boxing it would only add an allocation.
    #[allow(clippy::result_large_err)]
    pub(crate) fn identify(&self) -> Result<Identity<'_>, (HttpResponse, Outcome)> {
        // The `Idempotency-Key` header, or a webhook event's id where the policy says.
        let key = crate::webhook::key_of(self.policy, self.req.headers(), &self.content)?;
        let method = self.req.method().as_str();
        let path = Fingerprint::canonical_target(
            self.req
                .uri()
                .path_and_query()
                .map_or_else(|| self.req.path(), |pq| pq.as_str()),
        );
        let fingerprint =
            match Fingerprint::of_request(method, &path, self.req.headers(), &self.content) {
                Ok(fingerprint) => fingerprint,
                Err(error) => {
                    return Err((
                        ProblemKind::BodyInvalid.response(error.to_string()),
                        Outcome::InvalidBody,
                    ));
                }
            };
        Ok(Identity {
            key,
            method,
            path,
            fingerprint,
        })
    }

    async fn run_inner<F>(self, scope: &str, handler: F) -> (HttpResponse, Outcome)
    where
        F: for<'t> AsyncFnOnce(Tx<'t, DB>) -> HttpResponse,
    {
        let identity = match self.identify() {
            Ok(identity) => identity,
            Err(answer) => return answer,
        };
        let claim = identity.claim(scope, self.policy.retention(), self.idem.claim_wait_time());
        if let Some(answer) = self.answer_from_read(&claim, false).await {
            return answer;
        }

        let mut txn = match timed(
            self.policy,
            "begin",
            DB::begin(self.idem.pool(), self.idem.opening()),
        )
        .await
        {
            Ok(txn) => txn,
            // SQLite: another request holds the database's write lock past `claim_wait`.
            Err(error) if DB::is_lock_timeout(&error) => return self.busy(&claim),
            Err(error) => return (storage_unavailable(&error), Outcome::StorageError),
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
                    return match crate::encryption::open(self.idem.keyring(), &claim, existing) {
                        Ok(existing) => answer_existing(existing, &claim),
                        Err(answer) => answer,
                    };
                }
                Ok(Claim::Vanished) => return (in_progress(), Outcome::InProgress),
                Err(error) if DB::is_lock_timeout(&error) => {
                    return (in_progress(), Outcome::InProgress);
                }
                Err(error) => return (storage_unavailable(&error), Outcome::StorageError),
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
                let response = ProblemKind::HandlerPanicked
                    .response("the request failed and nothing was saved; it may be retried");
                return (response, Outcome::Panicked);
            }
        };

        // A 5xx, or a transient 4xx such as 429, is not an outcome to replay: roll back so
        // the client can retry the key.
        if self.idem.is_transient(response.status()) {
            let _ = txn.rollback().await;
            return (response, Outcome::RolledBack);
        }

        let (head, body_bytes) = match self.buffer_response(response, "nothing was saved").await {
            Ok(parts) => parts,
            Err(Unbuffered::TooLarge) => {
                return (self.too_large("nothing was saved"), Outcome::TooLarge);
            }
            Err(Unbuffered::Failed(answer)) => return (answer, Outcome::RolledBack),
        };
        let (status, stored_headers, stored_body) =
            self.seal_response(&claim, generation, &head, &body_bytes);
        let stored = StoredResponse {
            status,
            headers: &stored_headers,
            body: &stored_body,
        };
        let outcome = match timed(
            self.policy,
            "complete",
            DB::complete(&mut txn, &claim, &stored),
        )
        .await
        {
            Ok(Completion::Recorded) => match timed(self.policy, "commit", txn.commit()).await {
                Ok(()) => Outcome::Executed,
                Err(error) => return (commit_failed::<DB>(&error), Outcome::StorageError),
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
                let response = ProblemKind::TransactionEnded
                    .response("the request failed and nothing was saved; it may be retried");
                return (response, Outcome::RolledBack);
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
                    let response = ProblemKind::TransactionAborted
                        .response("the request failed and nothing was saved; it may be retried");
                    return (response, Outcome::RolledBack);
                }
                if let Err(error) = self
                    .record_without_effects(&claim, &head, &body_bytes)
                    .await
                {
                    // The answer is still right; a retry re-runs the handler instead.
                    tracing::warn!(%error, "could not store a 4xx answered after a failed statement");
                }
                Outcome::Executed
            }
            Err(error) => return (storage_unavailable(&error), Outcome::StorageError),
        };
        (head.set_body(body_bytes).map_into_boxed_body(), outcome)
    }

    /// On a backend that lets one writer in at a time, answers from a plain read a
    /// request whose key is held already (a replay, a 422, a 409 for a live lease), so it
    /// never waits for another request's write lock. `None`: the key is absent, or must
    /// be reclaimed (`phased`: or taken over), which needs the write lock; or the read
    /// failed, and the claim will fail the same way or see the row itself.
    pub(crate) async fn answer_from_read(
        &self,
        claim: &ClaimRequest<'_>,
        phased: bool,
    ) -> Option<(HttpResponse, Outcome)> {
        if !DB::ONE_WRITER {
            return None;
        }
        let peeked = match timed(self.policy, "read", DB::peek(self.idem.pool(), claim)).await {
            Ok(peeked) => peeked?,
            Err(error) => {
                tracing::debug!(%error, "could not read the key; claiming it instead");
                return None;
            }
        };
        if peeked.expired && peeked.lease_free {
            return None;
        }
        // The same decisions as the claims make on the rows they find.
        if phased {
            if let Some(answer) = mismatched(&peeked.key, claim) {
                return Some(answer);
            }
            if !peeked.key.completed && peeked.lease_free {
                return None;
            }
        }
        Some(
            match crate::encryption::open(self.idem.keyring(), claim, peeked.key) {
                Ok(existing) => answer_existing(existing, claim),
                Err(answer) => answer,
            },
        )
    }

    /// The answer to a request that could not get the database's one write lock within
    /// `claim_wait`: 409 when a request of this process holds its key, else 503
    /// `storage-busy`, as the lock holder may be any request.
    pub(crate) fn busy(&self, claim: &ClaimRequest<'_>) -> (HttpResponse, Outcome) {
        if self.idem.in_flight().holds(claim) {
            return (in_progress(), Outcome::InProgress);
        }
        tracing::warn!(
            handler = self.policy.handler(),
            "the database's write lock stayed with other requests past claim_wait"
        );
        let response = ProblemKind::StorageBusy.response(
            "the database is busy with other requests; nothing was saved; retry with the same \
             Idempotency-Key after the delay in Retry-After",
        );
        (response, Outcome::Busy)
    }

    /// Reads the handler's response body into memory to store it, up to the stored limit.
    /// `consequence` completes the problem's detail of a failed body stream: what became
    /// of the request's writes.
    pub(crate) async fn buffer_response(
        &self,
        response: HttpResponse,
        consequence: &str,
    ) -> Result<(HttpResponse<()>, Bytes), Unbuffered> {
        let (head, response_body) = response.into_parts();
        match body::to_bytes_limited(response_body, self.idem.stored_limit()).await {
            Ok(Ok(bytes)) => Ok((head, bytes)),
            Ok(Err(error)) => {
                tracing::error!(handler = self.policy.handler(), %error, "response body failed");
                let response = ProblemKind::ResponseFailed.response(format!(
                    "the request failed and {consequence}; it may be retried"
                ));
                Err(Unbuffered::Failed(response))
            }
            Err(BodyLimitExceeded { .. }) => {
                tracing::error!(
                    handler = self.policy.handler(),
                    limit = self.idem.stored_limit(),
                    "response too large to store for replay (raise Idem::max_stored_bytes)"
                );
                Err(Unbuffered::TooLarge)
            }
        }
    }

    /// The `response-too-large` problem, its detail completed by `consequence`.
    pub(crate) fn too_large(&self, consequence: &str) -> HttpResponse {
        ProblemKind::ResponseTooLarge.response(format!(
            "the response is larger than the {} bytes the server stores for replay; \
             {consequence}",
            self.idem.stored_limit()
        ))
    }

    /// The response as the key store keeps it: its status, the allow-listed headers as
    /// HTTP/1 lines and the body, both sealed when a keyring is configured.
    /// `generation` is the life of the key row the response is stored in.
    pub(crate) fn seal_response<'a>(
        &self,
        claim: &ClaimRequest<'_>,
        generation: i64,
        head: &HttpResponse<()>,
        body: &'a [u8],
    ) -> (u16, Vec<u8>, Cow<'a, [u8]>) {
        let status = head.status().as_u16();
        let headers = encode_headers(head.headers(), self.idem.replayed_headers());
        let row = crate::encryption::Row {
            scope: claim.scope,
            key: claim.key,
            generation,
            status,
        };
        let (headers, body) = crate::encryption::seal(self.idem.keyring(), &row, headers, body);
        (status, headers, body)
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
        head: &HttpResponse<()>,
        body: &[u8],
    ) -> Result<(), sqlx::Error> {
        let mut txn = DB::begin(self.idem.pool(), self.idem.opening()).await?;
        if let Claim::Claimed { generation } = DB::claim(&mut txn, claim).await? {
            let (status, headers, body) = self.seal_response(claim, generation, head, body);
            let stored = StoredResponse {
                status,
                headers: &headers,
                body: &body,
            };
            DB::complete(&mut txn, claim, &stored).await?;
            txn.commit().await?;
        }
        Ok(())
    }
}

fn stored_status_is_client_error(stored: &StoredResponse<'_>) -> bool {
    (400..500).contains(&stored.status)
}

/// The 422 for a key that belongs to a different request, if it does.
pub(crate) fn mismatched(
    existing: &ExistingKey,
    claim: &ClaimRequest<'_>,
) -> Option<(HttpResponse, Outcome)> {
    if existing.method != claim.method || existing.path != claim.path {
        let detail = format!(
            "this Idempotency-Key was used for {} {}; use a new key for a different request",
            existing.method, existing.path
        );
        return Some((mismatch(detail, "method_or_path"), Outcome::Mismatch));
    }
    if existing.fingerprint != Some(claim.fingerprint) {
        let detail = "this Idempotency-Key was used with a different request body; \
                      use a new key for a different request";
        return Some((mismatch(detail.to_owned(), "body"), Outcome::Mismatch));
    }
    None
}

/// The answer to a request whose key another request holds: 422, a replay or 409.
pub(crate) fn answer_existing(
    existing: ExistingKey,
    claim: &ClaimRequest<'_>,
) -> (HttpResponse, Outcome) {
    if let Some(answer) = mismatched(&existing, claim) {
        return answer;
    }
    match (
        existing.completed,
        existing.response_status,
        existing.response_body,
    ) {
        (true, Some(status), Some(body)) => {
            let headers = existing.response_headers.unwrap_or_default();
            (replay(status, &headers, body), Outcome::Replayed)
        }
        _ => (in_progress(), Outcome::InProgress),
    }
}

fn mismatch(detail: String, what: &str) -> HttpResponse {
    let mut extra = Map::new();
    extra.insert("mismatch".to_owned(), Value::from(what));
    ProblemKind::KeyReused.response_with(detail, extra)
}

pub(crate) fn in_progress() -> HttpResponse {
    ProblemKind::InProgress.response(
        "a request with this Idempotency-Key is still being processed; retry after the delay \
         in Retry-After",
    )
}

/// The answer to a COMMIT that failed: nothing was saved when the database refused it,
/// but when its answer was lost the transaction may have committed.
fn commit_failed<DB: Backend>(error: &sqlx::Error) -> HttpResponse {
    if DB::is_definite_rollback(error) {
        return storage_unavailable(error);
    }
    tracing::error!(%error, "the COMMIT went unanswered; its outcome is unknown");
    ProblemKind::StorageUnavailable.response(
        "the database did not confirm the commit, so the request may or may not have been \
         saved; retrying with the same Idempotency-Key is safe and returns its outcome",
    )
}

/// Why a handler's response could not be read for storing.
pub(crate) enum Unbuffered {
    /// It is larger than `Idem::max_stored_bytes`.
    TooLarge,
    /// Its body stream failed; the problem to answer.
    Failed(HttpResponse),
}

/// Keys held by requests of this process whose transaction is open, for a backend that
/// lets one writer in at a time: there a request that waited in vain for the write lock
/// cannot see, in the database, whether the holder has its key (the holder's row is not
/// committed), but it can ask here. Counts, not a set, as a retry may claim a key before
/// the request that rolled it back has dropped its guard.
#[derive(Debug, Default)]
pub(crate) struct InFlight(Mutex<HashMap<(String, String), usize>>);

impl InFlight {
    pub(crate) fn hold(self: &Arc<Self>, claim: &ClaimRequest<'_>) -> Held {
        let id = (claim.scope.to_owned(), claim.key.to_owned());
        *self.lock().entry(id.clone()).or_default() += 1;
        Held {
            in_flight: Arc::clone(self),
            id,
        }
    }

    fn holds(&self, claim: &ClaimRequest<'_>) -> bool {
        self.lock()
            .contains_key(&(claim.scope.to_owned(), claim.key.to_owned()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), usize>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A key announced in [`InFlight`] until dropped.
#[derive(Debug)]
pub(crate) struct Held {
    in_flight: Arc<InFlight>,
    id: (String, String),
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.in_flight.lock();
        if let Some(count) = held.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.id);
            }
        }
    }
}

pub(crate) fn storage_unavailable(error: &sqlx::Error) -> HttpResponse {
    tracing::error!(%error, "idempotency key store failed; rolled back");
    ProblemKind::StorageUnavailable
        .response("the request could not be completed and nothing was saved; it may be retried")
}

fn replay(status: i16, headers: &[u8], body: Vec<u8>) -> HttpResponse {
    let status = u16::try_from(status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::with_body(status, BoxBody::new(Bytes::from(body)));
    let map = response.headers_mut();
    for (name, value) in decode_headers(headers) {
        map.append(name, value);
    }
    map.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}

/// Allow-listed headers as the store's header block.
pub(crate) fn encode_headers(headers: &HeaderMap, allowed: &[HeaderName]) -> Vec<u8> {
    let mut out = Vec::new();
    for name in allowed {
        for value in headers.get_all(name) {
            crate::store::push_header_line(&mut out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    out
}

fn decode_headers(encoded: &[u8]) -> impl Iterator<Item = (HeaderName, HeaderValue)> + '_ {
    crate::store::header_lines(encoded).filter_map(|(name, value)| {
        Some((
            HeaderName::from_bytes(name).ok()?,
            HeaderValue::from_bytes(value).ok()?,
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header;

    /// The database refused the COMMIT: rolled back. Its answer was lost: unknown.
    #[test]
    fn a_failed_commit_says_what_is_known_of_its_outcome() {
        use crate::store::AnyBackend as DefaultBackend;

        let detail = |response: HttpResponse| {
            let body = body::to_bytes(response.into_body())
                .now_or_never()
                .expect("a buffered body")
                .expect("readable");
            let value: Value = serde_json::from_slice(&body).expect("JSON");
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

    #[test]
    fn headers_round_trip_in_order_with_repeats() {
        let mut headers = HeaderMap::new();
        headers.insert(header::LOCATION, HeaderValue::from_static("/orders/7"));
        headers.append(header::LINK, HeaderValue::from_static("<a>; rel=x"));
        headers.append(header::LINK, HeaderValue::from_static("<b>; rel=y"));
        headers.insert(header::SET_COOKIE, HeaderValue::from_static("s=1"));
        headers.insert(
            header::ETAG,
            HeaderValue::from_bytes(b"\"\xe9t\xe9\"").unwrap(),
        );
        let allowed = [header::LOCATION, header::LINK, header::ETAG];
        let encoded = encode_headers(&headers, &allowed);
        let decoded: Vec<_> = decode_headers(&encoded).collect();
        assert_eq!(
            decoded,
            vec![
                (header::LOCATION, HeaderValue::from_static("/orders/7")),
                (header::LINK, HeaderValue::from_static("<a>; rel=x")),
                (header::LINK, HeaderValue::from_static("<b>; rel=y")),
                (
                    header::ETAG,
                    HeaderValue::from_bytes(b"\"\xe9t\xe9\"").unwrap()
                ),
            ]
        );
    }
}
