//! RFC 9457 problem responses that idem itself sends.
//!
//! Every answer idem gives instead of running the handler is an
//! `application/problem+json` body whose `type` is one of the stable URIs below.
//! Each URI points at the heading of this page that describes it.
//!
//! | status | `type` ends in | when |
//! |---|---|---|
//! | 400 | `#idempotency-key-missing` | the endpoint requires a key and none was sent |
//! | 400 | `#idempotency-key-invalid` | empty, over 255 characters, not visible ASCII, malformed quoting, or sent twice |
//! | 400 | `#request-body-invalid` | the body claims to be JSON and is not |
//! | 400 | `#event-id-missing` | a webhook handler's event id (its `key = header(..)` or `json(..)`) is absent |
//! | 400 | `#event-id-invalid` | the event id is empty, over 255 characters, not visible ASCII, or its header is sent twice |
//! | 401 | `#webhook-signature-invalid` | [`SignedWebhook`](crate::SignedWebhook): the delivery's signature headers are missing, its timestamp is outside the tolerance, or no signature matches |
//! | 400 | `#request-body-encoding-invalid` | the body does not decode as its `Content-Encoding` (`gzip`, `deflate`, `br` or `zstd`) says |
//! | 409 | `#request-in-progress` | the same key is still being processed; `Retry-After: 1` |
//! | 413 | `#request-body-too-large` | the body exceeds [`Idem::max_request_bytes`](crate::Idem::max_request_bytes) |
//! | 422 | `#idempotency-key-reused` | the key was used for a different request; `mismatch` says `"method_or_path"` or `"body"` |
//! | 500 | `#response-too-large` | the handler's response exceeds [`Idem::max_stored_bytes`](crate::Idem::max_stored_bytes); nothing was committed (in the phased form: recorded as the key's answer) |
//! | 500 | `#response-failed` | the handler's response body stream failed; nothing was committed |
//! | 500 | `#handler-panicked` | the handler panicked; nothing was committed |
//! | 500 | `#transaction-ended` | the handler ended idem's transaction itself (a raw `COMMIT` or `ROLLBACK`) |
//! | 500 | `#transaction-aborted` | the handler answered 2xx or 3xx although one of its statements failed, so its writes were lost; rolled back |
//! | 500 | `#stored-response-unreadable` | the stored response does not decrypt (altered, or sealed by a key no longer configured); not replayed |
//! | 500 | `#not-configured` | no [`Idem`](crate::Idem) was registered with `App::app_data` |
//! | 500 | `#operation-failed` | an operator marked this key's unfinished operation failed ([`resolve_key`](crate::admin::resolve_key)); replayed to every retry |
//! | 503 | `#storage-busy` | SQLite: another request (for another key) held the database's write lock past [`Idem::claim_wait`](crate::Idem::claim_wait); nothing was saved; `Retry-After: 1` |
//! | 503 | `#storage-unavailable` | the database failed or timed out; nothing was committed, or, when a COMMIT went unanswered, the outcome is unknown and the detail says so; `Retry-After: 1` |
//!
//! In the phased form "nothing was committed" means the failed phase and the response:
//! phases that committed before the failure stay recorded, and a retry with the same key
//! resumes after them instead of running them again.
//!
//! # idempotency-key-missing
//! Send an `Idempotency-Key` header, generated once per logical operation and reused on
//! every retry of it.
//! # idempotency-key-invalid
//! Keys are 1 to 255 visible ASCII characters, bare or as a Structured Field string.
//! # event-id-missing
//! A webhook handler takes its key from the event: the header or JSON field its
//! `#[idempotent(key = ..)]` names must be present. Nothing was stored.
//! # event-id-invalid
//! An event id is used as the key: 1 to 255 visible ASCII characters (a JSON field may be
//! a string or an integer). Nothing was stored.
//! # webhook-signature-invalid
//! The delivery did not verify as its sender's: its `webhook-timestamp` and
//! `webhook-signature` headers are missing, the timestamp is too far from the receiver's
//! clock, or no signature matches the id, timestamp and body with the sender's secret.
//! Refused before anything was stored; a sender retries with a fresh signature.
//! # request-body-invalid
//! A body sent with a JSON content type must parse as JSON.
//! # request-body-encoding-invalid
//! A body sent with `Content-Encoding: gzip`, `deflate`, `br` or `zstd` must be a
//! complete, valid stream of that encoding: idem decodes it to fingerprint what the
//! handler reads. Refused before the handler's extractors run and before anything is
//! stored.
//! # request-in-progress
//! Another request with this key has not finished. Retry after the `Retry-After` delay.
//! # request-body-too-large
//! The body was refused before anything was stored.
//! # idempotency-key-reused
//! The key belongs to an earlier request with a different method, path or body.
//! # response-too-large
//! The response could not be stored for replay, so the whole transaction was rolled back.
//! In the phased form the phases have committed and cannot be undone, so this problem is
//! recorded as the key's answer instead and replayed to every retry: no retry runs the
//! handler again, and the key completes rather than staying in progress.
//! # response-failed
//! The handler's streaming response failed before it could be stored; nothing was saved.
//! # handler-panicked
//! The handler panicked. The transaction was rolled back and the key may be retried.
//! # transaction-ended
//! The handler committed or rolled back the transaction idem gave it.
//! # transaction-aborted
//! A statement of the handler failed, which aborts the transaction, yet the handler
//! answered success. Its writes were lost, so the request was rolled back. A 4xx
//! answered after a failed statement is stored (in a transaction of its own) and
//! replayed like any other.
//! # stored-response-unreadable
//! With encrypted storage, the stored response to this key did not decrypt: it was
//! altered, or sealed by a key that is no longer in the keyring, or it is in clear where a
//! sealed value belongs (written by someone else, or stored before encryption was turned
//! on and outside `Keyring::allow_plaintext_until`). It is never replayed.
//! # not-configured
//! The application did not register `idem::Idem` in its app data.
//! # operation-failed
//! The operation under this key never finished (its process died after some of its steps
//! committed, and no retry completed it within its retention), and an operator resolved
//! it as failed; `detail` is the operator's text. Every retry with this key gets this
//! answer: the key does not run again. Use a new key for a new attempt.
//! # storage-busy
//! The database lets one writer in at a time (SQLite) and was busy with other requests
//! for longer than the server waits. Nothing was saved; retry with the same key after
//! the `Retry-After` delay. This says nothing about the key: another request with it is
//! answered `request-in-progress` instead.
//! # storage-unavailable
//! The key store could not be reached or answered with an error. Mostly nothing was
//! saved, and the detail says so. When the database refused the final COMMIT (a deferred
//! constraint, say), it rolled everything back: nothing was saved either. When the COMMIT
//! was sent but its answer never came (the connection broke), idem cannot know whether
//! it took effect; the detail says the request may or may not have been saved. Either way
//! a retry with the same key is safe: it replays the outcome if it was saved, and runs
//! the request if it was not.

use bytes::Bytes;
use http::StatusCode;
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use serde_json::{Map, Value, json};

const TYPE_BASE: &str = "https://docs.rs/idem/latest/idem/problem/index.html#";

/// Media type of RFC 9457 problem details.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The kinds of problem idem answers with; each has a stable `type` URI.
///
/// ```
/// use idem_runtime::problem::ProblemKind;
///
/// let response = ProblemKind::InProgress.response("try again shortly");
/// assert_eq!(response.status(), 409);
/// assert_eq!(response.headers().get("retry-after").unwrap(), "1");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// 400: the request has no key.
    KeyMissing,
    /// 400: the key is malformed or sent twice.
    KeyInvalid,
    /// 400: a JSON content type with a body that is not JSON.
    BodyInvalid,
    /// 400: a body that does not decode as its `Content-Encoding` says.
    EncodingInvalid,
    /// 409: the key is in use by a request that has not finished.
    InProgress,
    /// 413: the request body is larger than the configured limit.
    BodyTooLarge,
    /// 422: the key was used for a different request.
    KeyReused,
    /// 500: the response is too large to store.
    ResponseTooLarge,
    /// 500: the handler's response body failed while it was read.
    ResponseFailed,
    /// 500: the handler panicked.
    HandlerPanicked,
    /// 500: the handler ended the transaction itself.
    TransactionEnded,
    /// 500: the handler answered success although one of its statements failed.
    TransactionAborted,
    /// 500: the stored response does not decrypt.
    StoredResponseUnreadable,
    /// 500: the key store holds a value under the request's key that idem did not write
    /// (Redis: another type, or a hash without idem's mark), which is never replayed.
    KeyValueForeign,
    /// 500: idem is not registered in the application.
    NotConfigured,
    /// 503: the key store failed.
    StorageUnavailable,
    /// 500: an operator marked an unfinished operation failed (`idem resolve --failed`).
    OperationFailed,
    /// 503: SQLite's one write lock stayed with other requests past the claim wait.
    StorageBusy,
    /// 400: a webhook handler's event id (header or JSON field) is absent.
    EventIdMissing,
    /// 400: the event id is not a usable key.
    EventIdInvalid,
    /// 401: a webhook delivery's signature did not verify.
    SignatureInvalid,
}

impl ProblemKind {
    /// The slug that ends the `type` URI.
    pub fn slug(self) -> &'static str {
        match self {
            Self::KeyMissing => "idempotency-key-missing",
            Self::KeyInvalid => "idempotency-key-invalid",
            Self::BodyInvalid => "request-body-invalid",
            Self::EncodingInvalid => "request-body-encoding-invalid",
            Self::InProgress => "request-in-progress",
            Self::BodyTooLarge => "request-body-too-large",
            Self::KeyReused => "idempotency-key-reused",
            Self::ResponseTooLarge => "response-too-large",
            Self::ResponseFailed => "response-failed",
            Self::HandlerPanicked => "handler-panicked",
            Self::TransactionEnded => "transaction-ended",
            Self::TransactionAborted => "transaction-aborted",
            Self::StoredResponseUnreadable => "stored-response-unreadable",
            Self::KeyValueForeign => "key-value-foreign",
            Self::NotConfigured => "not-configured",
            Self::StorageUnavailable => "storage-unavailable",
            Self::OperationFailed => "operation-failed",
            Self::StorageBusy => "storage-busy",
            Self::EventIdMissing => "event-id-missing",
            Self::EventIdInvalid => "event-id-invalid",
            Self::SignatureInvalid => "webhook-signature-invalid",
        }
    }

    /// The full `type` URI.
    pub fn type_uri(self) -> String {
        format!("{TYPE_BASE}{}", self.slug())
    }

    /// The HTTP status this problem is sent with.
    pub fn status(self) -> StatusCode {
        match self {
            Self::KeyMissing
            | Self::KeyInvalid
            | Self::BodyInvalid
            | Self::EncodingInvalid
            | Self::EventIdMissing
            | Self::EventIdInvalid => StatusCode::BAD_REQUEST,
            Self::SignatureInvalid => StatusCode::UNAUTHORIZED,
            Self::InProgress => StatusCode::CONFLICT,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::ResponseTooLarge
            | Self::ResponseFailed
            | Self::HandlerPanicked
            | Self::TransactionEnded
            | Self::TransactionAborted
            | Self::StoredResponseUnreadable
            | Self::KeyValueForeign
            | Self::NotConfigured
            | Self::OperationFailed => StatusCode::INTERNAL_SERVER_ERROR,
            Self::StorageUnavailable | Self::StorageBusy => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn title(self) -> &'static str {
        match self {
            Self::KeyMissing => "Idempotency-Key header missing",
            Self::KeyInvalid => "Idempotency-Key header invalid",
            Self::BodyInvalid => "Request body is not valid JSON",
            Self::EncodingInvalid => "Request body does not decode as its Content-Encoding says",
            Self::InProgress => "A request with this Idempotency-Key is in progress",
            Self::BodyTooLarge => "Request body too large",
            Self::KeyReused => "Idempotency-Key reused for a different request",
            Self::ResponseTooLarge => "Response too large to store for replay",
            Self::ResponseFailed => "Response body failed",
            Self::HandlerPanicked => "Handler panicked",
            Self::TransactionEnded => "Handler ended the idempotency transaction",
            Self::TransactionAborted => "Handler succeeded after a failed statement",
            Self::StoredResponseUnreadable => "Stored response cannot be decrypted",
            Self::KeyValueForeign => "Key store holds a value idem did not write",
            Self::NotConfigured => "Idempotency is not configured",
            Self::StorageUnavailable => "Idempotency key store unavailable",
            Self::OperationFailed => "Operation marked failed by an operator",
            Self::StorageBusy => "Database busy with other requests",
            Self::EventIdMissing => "Webhook event id missing",
            Self::EventIdInvalid => "Webhook event id invalid",
            Self::SignatureInvalid => "Webhook signature invalid",
        }
    }

    /// The problem with a human-readable `detail`, as a value a framework adapter renders.
    ///
    /// ```
    /// use idem_runtime::problem::ProblemKind;
    ///
    /// let problem = ProblemKind::KeyMissing.problem("send an Idempotency-Key header");
    /// assert_eq!(problem.status(), 400);
    /// assert_eq!(problem.detail(), "send an Idempotency-Key header");
    /// ```
    pub fn problem(self, detail: impl Into<String>) -> Problem {
        Problem {
            kind: self,
            detail: detail.into(),
            extra: Map::new(),
        }
    }

    /// Builds the response with a human-readable `detail`.
    pub fn response(self, detail: impl Into<String>) -> http::Response<Bytes> {
        self.problem(detail).to_response()
    }

    /// Builds the response with extension members beside the standard ones.
    pub fn response_with(
        self,
        detail: impl Into<String>,
        extra: Map<String, Value>,
    ) -> http::Response<Bytes> {
        self.problem(detail).with_members(extra).to_response()
    }

    /// Whether the answer carries `Retry-After: 1`: the same key may succeed shortly.
    fn retry_after(self) -> bool {
        matches!(
            self,
            Self::InProgress | Self::StorageUnavailable | Self::StorageBusy
        )
    }

    /// The problem document itself, for answers idem stores rather than sends.
    pub(crate) fn body(self, detail: impl Into<String>, extra: Map<String, Value>) -> String {
        let mut body = json!({
            "type": self.type_uri(),
            "title": self.title(),
            "status": self.status().as_u16(),
            "detail": detail.into(),
        });
        if let Value::Object(members) = &mut body {
            members.extend(extra);
        }
        body.to_string()
    }
}

/// One answer idem gives instead of the handler's: its kind, the detail for this request
/// and any extension members, independent of the web framework that sends it. An
/// adapter renders it (see [`to_response`](Self::to_response) for `http` 1.x).
///
/// ```
/// use idem_runtime::problem::ProblemKind;
///
/// let response = ProblemKind::InProgress.problem("try again shortly").to_response();
/// assert_eq!(response.status(), 409);
/// assert_eq!(response.headers()["retry-after"], "1");
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    kind: ProblemKind,
    detail: String,
    extra: Map<String, Value>,
}

impl Problem {
    /// The same problem with extension members beside the standard ones.
    ///
    /// ```
    /// use idem_runtime::problem::ProblemKind;
    ///
    /// let mut extra = serde_json::Map::new();
    /// extra.insert("mismatch".into(), "body".into());
    /// let problem = ProblemKind::KeyReused.problem("a different body").with_members(extra);
    /// let body: serde_json::Value = serde_json::from_slice(&problem.body()).unwrap();
    /// assert_eq!(body["mismatch"], "body");
    /// ```
    pub fn with_members(mut self, extra: Map<String, Value>) -> Self {
        self.extra.extend(extra);
        self
    }

    /// What kind of problem it is.
    pub fn kind(&self) -> ProblemKind {
        self.kind
    }

    /// The detail for this request.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The status it is sent with.
    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The headers it is sent with, besides those of the framework: its content type and,
    /// for an answer that may change shortly, `Retry-After: 1`.
    ///
    /// ```
    /// use idem_runtime::problem::ProblemKind;
    ///
    /// let headers: Vec<_> = ProblemKind::StorageBusy.problem("busy").headers().collect();
    /// assert_eq!(headers, [("content-type", "application/problem+json"), ("retry-after", "1")]);
    /// ```
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, &'static str)> + use<> {
        let retry = self.kind.retry_after().then_some(("retry-after", "1"));
        std::iter::once(("content-type", PROBLEM_JSON)).chain(retry)
    }

    /// The `application/problem+json` document.
    pub fn body(&self) -> Bytes {
        Bytes::from(self.kind.body(self.detail.clone(), self.extra.clone()))
    }

    /// The `application/problem+json` document, taking the problem.
    pub fn into_body(self) -> Bytes {
        Bytes::from(self.kind.body(self.detail, self.extra))
    }

    /// The response, in `http` 1.x types.
    pub fn to_response(&self) -> http::Response<Bytes> {
        let mut response = http::Response::new(self.body());
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if self.kind.retry_after() {
            headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
