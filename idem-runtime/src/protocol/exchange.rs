//! What both forms of the protocol share: one request as the core sees it, its identity
//! in the key store, and the answers the claim's outcomes call for.

use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{Map, Value};
use sqlx::Transaction;
use sqlx::pool::PoolConnection;
use tracing::Instrument;

use crate::protocol::config::{Configured, Idem};
use crate::protocol::fingerprint::Fingerprint;
use crate::protocol::framework::{Framework, Unbuffered};
use crate::protocol::headers::{Headers, first_text};
use crate::protocol::key::{IdempotencyKey, KeySource};
use crate::protocol::metrics::timed;
use crate::protocol::outcome::Outcome;
use crate::protocol::policy::Policy;
use crate::protocol::problem::{Problem, ProblemKind};
use crate::protocol::scope::{is_signed_sender, legacy_sender_scope};
use crate::protocol::webhook::WEBHOOK_ID;
use crate::store::{Backend, ClaimRequest, ExistingKey, OwnedResponse};

/// A request's final answer and how idem came to it.
pub(crate) type Done<W> = (<W as Framework>::Response, Outcome);

/// A problem answer, in the framework's response type.
pub(crate) fn answer<W: Framework>((problem, outcome): (Problem, Outcome)) -> Done<W> {
    (W::problem(problem), outcome)
}

/// One request as the core reads it: what an adapter hands over once it has found the
/// [`Idem`], buffered the body and decoded its content.
/// `C` is the key store's configuration: [`Idem`] for a relational database.
pub(crate) struct Exchange<'r, C, W, H: ?Sized> {
    pub(crate) idem: &'r C,
    pub(crate) policy: &'static Policy,
    pub(crate) method: &'r str,
    /// The path and query as sent.
    pub(crate) target: &'r str,
    pub(crate) headers: &'r H,
    /// The body as sent: what a webhook's sender signed.
    pub(crate) raw: &'r [u8],
    /// The body decoded from its `Content-Encoding`: what the extractors read.
    pub(crate) content: &'r [u8],
    pub(crate) framework: PhantomData<W>,
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

/// Runs one form of the protocol inside the `idempotent` span, then records its outcome
/// on the span, in the metrics and, for a webhook, in the log.
///
/// Callers hand `run` over boxed: the state machine holds the claim's, the handler's and
/// the record's futures, and the framework moves the handler's future several times
/// before polling it (actix-web three times, then into its own box). A pointer moves for
/// the cost of a word, the whole state for a memcpy of its size each time.
pub(crate) async fn instrumented<W: Framework>(
    policy: &'static Policy,
    run: impl Future<Output = Done<W>>,
) -> W::Response {
    let span = tracing::debug_span!(
        "idempotent",
        handler = policy.handler(),
        outcome = tracing::field::Empty,
    );
    let (response, outcome) = run.instrument(span.clone()).await;
    span.record("outcome", outcome.as_str());
    crate::protocol::metrics::outcome(policy, outcome);
    crate::protocol::webhook::after(policy, outcome);
    response
}

/// `Box::pin(make())`, with the future built in the box's memory. `Box::pin(future)`
/// builds the future on the stack and copies it into the allocation, a `memcpy` of its
/// whole size (the state machine's, kilobytes, though only its captured arguments are
/// set before the first poll); allocating first and writing the future into the
/// allocation lets the compiler build it there and copy nothing.
#[inline(always)]
pub(crate) fn boxed<F: Future>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

impl<C: Configured, W: Framework, H: Headers + ?Sized> Exchange<'_, C, W, H> {
    /// Reads the key and fingerprints the request for `scope` (as stored), or answers
    /// why it cannot.
    pub(crate) fn identify(&self, scope: &str) -> Result<Identity<'_>, (Problem, Outcome)> {
        let signed = is_signed_sender(scope);
        if signed && !crate::protocol::webhook::key_is_signed(self.policy) {
            // `#[idempotent]` refuses this at compile time where the scope's type is
            // written `SignedWebhook`, and the layer when it is built; a type alias gets
            // here.
            tracing::error!(
                handler = self.policy.handler(),
                "a handler scoped by a signed webhook takes its key from a header the sender \
                 did not sign; set key = header(\"webhook-id\") or key = json(..)"
            );
            let problem = ProblemKind::NotConfigured.problem(
                "the server takes this webhook's key from what the sender did not sign; this \
                 is a server bug",
            );
            return Err((problem, Outcome::Misconfigured));
        }
        // The `Idempotency-Key` header, or a webhook event's id where the policy says.
        let key = crate::protocol::webhook::key_of(self.policy, self.headers, self.content)?;
        let path = Fingerprint::canonical_target(self.target);
        let fingerprint = if signed {
            // What the sender signed, and the handler: not the query, `Content-Type` or
            // `Content-Encoding`, which anyone holding a captured delivery can change to
            // take the event's id with a request the handler refuses.
            let id = first_text(self.headers, WEBHOOK_ID.as_str()).unwrap_or_default();
            Fingerprint::signed(
                self.policy.module_path(),
                self.policy.handler(),
                id,
                self.raw,
            )
        } else {
            Fingerprint::of_request(self.method, &path, self.headers, self.content).map_err(
                |error| {
                    let problem = ProblemKind::BodyInvalid.problem(error.to_string());
                    (problem, Outcome::InvalidBody)
                },
            )?
        };
        Ok(Identity {
            key,
            method: self.method,
            path,
            fingerprint,
        })
    }

    /// Reads the handler's response body into memory to store it, up to the stored limit.
    /// `consequence` completes the problem's detail of a failed body stream: what became
    /// of the request's writes.
    pub(crate) async fn buffer_response(
        &self,
        response: W::Response,
        consequence: &str,
    ) -> Result<(W::Head, Bytes), Buffering<W>> {
        let limit = self.idem.settings().max_stored_bytes();
        match W::buffer(response, limit).await {
            Ok(parts) => Ok(parts),
            Err(Unbuffered::Failed(error)) => {
                tracing::error!(handler = self.policy.handler(), %error, "response body failed");
                let problem = ProblemKind::ResponseFailed.problem(format!(
                    "the request failed and {consequence}; it may be retried"
                ));
                Err(Buffering::Failed(W::problem(problem)))
            }
            Err(Unbuffered::TooLarge) => {
                tracing::error!(
                    handler = self.policy.handler(),
                    limit,
                    "response too large to store for replay (raise Idem::max_stored_bytes)"
                );
                Err(Buffering::TooLarge)
            }
        }
    }

    /// The `response-too-large` problem, its detail completed by `consequence`.
    pub(crate) fn too_large(&self, consequence: &str) -> Problem {
        ProblemKind::ResponseTooLarge.problem(format!(
            "the response is larger than the {} bytes the server stores for replay; \
             {consequence}",
            self.idem.settings().max_stored_bytes()
        ))
    }

    /// The response as the key store keeps it: its status, the allow-listed headers as
    /// HTTP/1 lines and the body, both sealed when a keyring is configured.
    /// `generation` is the life of the key row the response is stored in.
    pub(crate) fn seal_response<'a>(
        &self,
        claim: &ClaimRequest<'_>,
        generation: i64,
        head: &W::Head,
        body: &'a [u8],
    ) -> SealedResponse<'a> {
        let status = W::head_status(head).as_u16();
        // Room for the usual block (a `Location` and a `Content-Type`) in one allocation,
        // where growing from empty took four.
        let mut headers = Vec::with_capacity(128);
        W::stored_headers(head, self.idem.settings().replay_headers(), &mut headers);
        seal(
            self.idem.keyring(),
            claim,
            generation,
            status,
            headers,
            body,
        )
    }

    /// The answer to a request whose key another request holds, once its stored response
    /// is opened: 422, a replay or 409.
    pub(crate) fn answer_existing(
        &self,
        existing: ExistingKey,
        claim: &ClaimRequest<'_>,
    ) -> Done<W> {
        let existing = match crate::protocol::encryption::open(self.idem.keyring(), claim, existing)
        {
            Ok(existing) => existing,
            Err(unreadable) => return answer::<W>(unreadable),
        };
        if let Some(mismatch) = mismatched(&existing, claim, self.policy.key_source()) {
            return answer::<W>(mismatch);
        }
        match (
            existing.completed,
            existing.response_status,
            existing.response_body,
        ) {
            (true, Some(status), Some(body)) => {
                let headers = existing.response_headers.unwrap_or_default();
                let status = u16::try_from(status)
                    .ok()
                    .and_then(|s| http::StatusCode::from_u16(s).ok())
                    .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
                (W::replay(status, &headers, body), Outcome::Replayed)
            }
            _ => answer::<W>(in_progress()),
        }
    }
}

impl<DB: Backend, W: Framework, H: Headers + ?Sized> Exchange<'_, Idem<DB>, W, H> {
    /// The connection a request opens its transaction on, or the answer without one:
    /// on a backend with one writer, from a read of the key on that connection when the
    /// key is held already (see [`answer_from_read`](Self::answer_from_read)).
    /// `phased`: the claim is the phased form's.
    ///
    /// The read and the transaction share one pool connection: taking one for the read
    /// and another for the write cost a second acquisition and release (and the ping
    /// sqlx sends when a connection comes back) on every first execution.
    pub(crate) async fn connection(
        &self,
        claim: &ClaimRequest<'_>,
        phased: bool,
    ) -> Result<PoolConnection<DB>, Done<W>> {
        let mut conn = match self.idem.pool().acquire().await {
            Ok(conn) => conn,
            Err(error) => return Err(answer::<W>(storage_unavailable(&error))),
        };
        if let Some(answer) = self.answer_from_legacy(&mut conn, claim).await {
            return Err(answer);
        }
        if DB::ONE_WRITER
            && let Some(answer) = self.answer_from_read(&mut conn, claim, phased).await
        {
            return Err(answer);
        }
        Ok(conn)
    }

    /// Opens the request's transaction on the [`connection`](Self::connection) its key
    /// was read on, or answers why it could not.
    pub(crate) async fn begin(
        &self,
        conn: PoolConnection<DB>,
        claim: &ClaimRequest<'_>,
        phased: bool,
    ) -> Result<Transaction<'static, DB>, Done<W>> {
        match timed!(self.policy, "begin", DB::begin(conn, self.idem.opening())) {
            Ok(txn) => Ok(txn),
            Err(error) => Err(self.begin_failed(&error, claim, phased).await),
        }
    }

    /// The answer to a failed opening of the request's transaction.
    pub(crate) async fn begin_failed(
        &self,
        error: &sqlx::Error,
        claim: &ClaimRequest<'_>,
        phased: bool,
    ) -> Done<W> {
        if DB::is_lock_timeout(error) {
            // SQLite: another request holds the database's write lock past `claim_wait`.
            self.busy(claim, phased).await
        } else {
            answer::<W>(storage_unavailable(error))
        }
    }

    /// On a backend that lets one writer in at a time, answers from a plain read on
    /// `conn` a request whose key is held already (a replay, a 422, a 409 for a live
    /// lease), so it never waits for another request's write lock. `None`: the key is
    /// absent, or must be reclaimed (`phased`: or taken over), which needs the write lock;
    /// or the read failed, and the claim will fail the same way or see the row itself.
    async fn answer_from_read(
        &self,
        conn: &mut DB::Connection,
        claim: &ClaimRequest<'_>,
        phased: bool,
    ) -> Option<Done<W>> {
        let peeked = match timed!(self.policy, "read", DB::peek(conn, claim)) {
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
            if let Some(mismatch) = mismatched(&peeked.key, claim, self.policy.key_source()) {
                return Some(answer::<W>(mismatch));
            }
            if !peeked.key.completed && peeked.lease_free {
                return None;
            }
        }
        Some(self.answer_existing(peeked.key, claim))
    }

    /// A signed sender's keys were stored under its bare name before the `webhook:`
    /// namespace. For one retention after the upgrade, a delivery whose event id is held
    /// there is answered from that row, as it was before: a replay, 422, or 409 while it
    /// has no final answer (an attempt of an instance not yet upgraded, or a phased one
    /// left unfinished, which `idem resolve` settles). Only a row of the same method and
    /// path counts, and its body is compared by the fingerprint of the version that
    /// stored it.
    async fn answer_from_legacy(
        &self,
        conn: &mut DB::Connection,
        claim: &ClaimRequest<'_>,
    ) -> Option<Done<W>> {
        let mut legacy = ClaimRequest {
            scope: legacy_sender_scope(claim.scope)?,
            ..*claim
        };
        let found = match timed!(self.policy, "read", DB::read_key(conn, &legacy)) {
            Ok(found) => found?,
            Err(error) => return Some(answer::<W>(storage_unavailable(&error))),
        };
        // Only a row of this route: the bare name is any scope of the application's own
        // too (a tenant called like the sender), whose keys are no event's.
        if found.expired || found.key.method != legacy.method || found.key.path != legacy.path {
            return None;
        }
        if !found.key.completed {
            return Some(answer::<W>(in_progress()));
        }
        // Fingerprinted as that version did, only now that there is a row to compare with.
        let fingerprint =
            Fingerprint::of_request(self.method, claim.path, self.headers, self.content).ok()?;
        legacy.fingerprint = *fingerprint.as_bytes();
        Some(self.answer_existing(found.key, &legacy))
    }

    /// The answer to a request that could not get the database's one write lock within
    /// `claim_wait`: 409 when a request of this process holds its key; the answer a read
    /// of the key gives now, as the request holding it may have committed while this one
    /// waited (a replay, 422, 409); else 503 `storage-busy`, as the lock holder may be any
    /// request.
    async fn busy(&self, claim: &ClaimRequest<'_>, phased: bool) -> Done<W> {
        if self.idem.in_flight().holds(claim) {
            return answer::<W>(in_progress());
        }
        // The first read saw no committed key; the lock may since have passed from the
        // key's holder, after its commit, to any other writer. The first read's connection
        // went back to the pool with the failed begin (which restored its busy timeout);
        // after a wait of `claim_wait`, taking one again is no cost worth saving.
        let reread = if DB::ONE_WRITER {
            self.idem.pool().acquire().await.ok()
        } else {
            None
        };
        if let Some(mut conn) = reread
            && let Some(answer) = self.answer_from_read(&mut conn, claim, phased).await
        {
            return answer;
        }
        tracing::warn!(
            handler = self.policy.handler(),
            "the database's write lock stayed with other requests past claim_wait"
        );
        let problem = ProblemKind::StorageBusy.problem(
            "the database is busy with other requests; nothing was saved; retry with the same \
             Idempotency-Key after the delay in Retry-After",
        );
        (W::problem(problem), Outcome::Busy)
    }
}

/// A response sealed for the key store; [`SealedResponse::into_owned`] hands it to the store.
pub(crate) struct SealedResponse<'a> {
    status: u16,
    headers: Vec<u8>,
    body: Cow<'a, [u8]>,
}

impl SealedResponse<'_> {
    /// The response as the store may keep it beyond the caller's future; `body` is the
    /// answer's own body, shared rather than copied when it is stored in clear.
    pub(crate) fn into_owned(self, body: &Bytes) -> OwnedResponse {
        OwnedResponse {
            status: self.status,
            headers: self.headers,
            body: match self.body {
                Cow::Borrowed(_) => body.clone(),
                Cow::Owned(sealed) => sealed.into(),
            },
        }
    }
}

/// Seals a response's header block and body to the key row's life (`generation`).
pub(crate) fn seal<'a>(
    keyring: &crate::protocol::encryption::KeyringSlot,
    claim: &ClaimRequest<'_>,
    generation: i64,
    status: u16,
    headers: Vec<u8>,
    body: &'a [u8],
) -> SealedResponse<'a> {
    let row = crate::protocol::encryption::Row {
        scope: claim.scope,
        key: claim.key,
        generation,
        status,
    };
    let (headers, body) = crate::protocol::encryption::seal(keyring, &row, headers, body);
    SealedResponse {
        status,
        headers,
        body,
    }
}

/// Why a handler's response was not buffered, in the framework's terms.
pub(crate) enum Buffering<W: Framework> {
    /// It is larger than `Idem::max_stored_bytes`.
    TooLarge,
    /// Its body stream failed; the problem to answer.
    Failed(W::Response),
}

/// The 422 for a key that belongs to a different request, if it does. `source` is where
/// the policy takes the key from (`None`: the `Idempotency-Key` header), which the detail
/// names: a webhook's sender sets no `Idempotency-Key`.
pub(crate) fn mismatched(
    existing: &ExistingKey,
    claim: &ClaimRequest<'_>,
    source: Option<KeySource>,
) -> Option<(Problem, Outcome)> {
    let (key, fix) = match source {
        None => (
            Cow::Borrowed("this Idempotency-Key"),
            "use a new key for a different request",
        ),
        Some(source) => (
            Cow::Owned(format!("this event id (from {source})")),
            "a sender must give each event its own id",
        ),
    };
    // A signed webhook's method and path are not signed; its fingerprint names the
    // handler instead (see `identify`).
    if !is_signed_sender(claim.scope)
        && (existing.method != claim.method || existing.path != claim.path)
    {
        let detail = format!(
            "{key} was used for {} {}; {fix}",
            existing.method, existing.path
        );
        return Some((mismatch(detail, "method_or_path"), Outcome::Mismatch));
    }
    if existing.fingerprint != Some(claim.fingerprint) {
        let detail = format!("{key} was used with a different request body; {fix}");
        return Some((mismatch(detail, "body"), Outcome::Mismatch));
    }
    None
}

fn mismatch(detail: String, what: &str) -> Problem {
    let mut extra = Map::new();
    extra.insert("mismatch".to_owned(), Value::from(what));
    ProblemKind::KeyReused.problem(detail).with_members(extra)
}

/// 409: another request holds the key.
pub(crate) fn in_progress() -> (Problem, Outcome) {
    let problem = ProblemKind::InProgress.problem(
        "a request with this Idempotency-Key is still being processed; retry after the delay \
         in Retry-After",
    );
    (problem, Outcome::InProgress)
}

/// 503: the key store failed; nothing was saved.
pub(crate) fn storage_unavailable(error: &sqlx::Error) -> (Problem, Outcome) {
    tracing::error!(%error, "idempotency key store failed; rolled back");
    let problem = ProblemKind::StorageUnavailable
        .problem("the request could not be completed and nothing was saved; it may be retried");
    (problem, Outcome::StorageError)
}

/// Allow-listed headers of an `http` 1.x map as the store's header block.
pub(crate) fn encode_headers(headers: &HeaderMap, allowed: &[http::HeaderName]) -> Vec<u8> {
    let mut out = Vec::new();
    for name in allowed {
        for value in headers.get_all(name) {
            crate::store::push_header_line(&mut out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    out
}
