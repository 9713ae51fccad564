//! Webhook receivers: a handler whose key is the event's id, taken from a header or a
//! field of the JSON body instead of `Idempotency-Key`, scoped by the sender that an
//! extractor has verified; and a [Standard Webhooks](https://www.standardwebhooks.com/)
//! verifier to be that extractor.
//!
//! The handler runs on the same claim / record protocol as every `#[idempotent]`
//! handler: the event's first delivery runs it and stores its answer in the same
//! transaction as its writes; a redelivery gets the stored answer without running it; a
//! concurrent one waits or gets 409; the same id with a different body gets 422, which is
//! also logged as an error, since a sender that reuses an event id is broken or hostile.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix_web::dev::Payload;
use actix_web::http::header::{HeaderMap, HeaderName};
use actix_web::web::{self, Bytes};
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse, ResponseError};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::key::{IdempotencyKey, KeyError, KeySource, MAX_KEY_LEN};
use crate::outcome::Outcome;
use crate::policy::Policy;
use crate::problem::ProblemKind;
use crate::scope::ScopeKey;

/// The request's key as `policy` says where it is; for a problem, the answer and the
/// outcome to record.
// The error is the request's final answer, returned straight to actix.
#[allow(clippy::result_large_err)]
pub(crate) fn key_of(
    policy: &Policy,
    headers: &HeaderMap,
    content: &[u8],
) -> Result<IdempotencyKey, (HttpResponse, Outcome)> {
    let Some(source) = policy.key_source() else {
        return IdempotencyKey::from_headers(headers).map_err(|error| {
            let kind = match error {
                KeyError::Missing => ProblemKind::KeyMissing,
                _ => ProblemKind::KeyInvalid,
            };
            (kind.response(error.to_string()), Outcome::InvalidKey)
        });
    };
    let value = match source {
        KeySource::Header(name) => header_value(headers, name, source)?,
        KeySource::Json(field) => json_value(content, field, source)?,
    };
    IdempotencyKey::parse(&value).map_err(|error| {
        let detail = match error {
            KeyError::TooLong(len) => format!(
                "the event id in {source} is {len} characters long; at most {MAX_KEY_LEN} are \
                 allowed"
            ),
            KeyError::Empty => format!("the event id in {source} is empty"),
            _ => format!(
                "the event id in {source} must be 1 to {MAX_KEY_LEN} visible ASCII characters \
                 ('!' to '~')"
            ),
        };
        (
            ProblemKind::EventIdInvalid.response(detail),
            Outcome::InvalidKey,
        )
    })
}

#[allow(clippy::result_large_err)]
fn header_value(
    headers: &HeaderMap,
    name: &str,
    source: KeySource,
) -> Result<String, (HttpResponse, Outcome)> {
    let mut values = headers.get_all(name);
    let Some(value) = values.next() else {
        return Err(missing(format!(
            "this endpoint takes the event's id from {source}, and the request has none"
        )));
    };
    if values.next().is_some() {
        return Err((
            ProblemKind::EventIdInvalid.response(format!("{source} must appear exactly once")),
            Outcome::InvalidKey,
        ));
    }
    match value.to_str() {
        Ok(text) => Ok(text.to_owned()),
        Err(_) => Err((
            ProblemKind::EventIdInvalid.response(format!(
                "the event id in {source} must be visible ASCII characters ('!' to '~')"
            )),
            Outcome::InvalidKey,
        )),
    }
}

#[allow(clippy::result_large_err)]
fn json_value(
    content: &[u8],
    field: &str,
    source: KeySource,
) -> Result<String, (HttpResponse, Outcome)> {
    let document: serde_json::Value = serde_json::from_slice(content).map_err(|error| {
        (
            ProblemKind::BodyInvalid.response(format!(
                "this endpoint takes the event's id from {source}, and the body is not JSON: \
                 {error}"
            )),
            Outcome::InvalidBody,
        )
    })?;
    let found = if field.starts_with('/') {
        document.pointer(field)
    } else {
        document.get(field)
    };
    match found {
        Some(serde_json::Value::String(text)) => Ok(text.clone()),
        Some(serde_json::Value::Number(number)) if number.is_i64() || number.is_u64() => {
            Ok(number.to_string())
        }
        Some(_) => Err((
            ProblemKind::EventIdInvalid.response(format!(
                "the event id in {source} must be a string or an integer"
            )),
            Outcome::InvalidKey,
        )),
        None => Err(missing(format!(
            "this endpoint takes the event's id from {source}, and the body has none"
        ))),
    }
}

fn missing(detail: String) -> (HttpResponse, Outcome) {
    (
        ProblemKind::EventIdMissing.response(detail),
        Outcome::InvalidKey,
    )
}

/// Logs a webhook delivery answered 422: a sender that sends one event id with two
/// different bodies has a bug, or someone else signs with its secret.
pub(crate) fn after(policy: &Policy, outcome: Outcome) {
    if outcome == Outcome::Mismatch
        && let Some(source) = policy.key_source()
    {
        tracing::error!(
            handler = policy.handler(),
            key_source = %source,
            "a webhook event id was delivered again with a different body; answered 422 \
             and kept the first delivery's effect; check the sender"
        );
    }
}

/// The body as received, put in the request's extensions by idem before the extractors
/// run, so that a verifier can check a signature over the exact bytes without taking
/// the payload from the extractors after it.
#[derive(Clone)]
pub(crate) struct RawBody(pub(crate) Bytes);

/// The headers of the [Standard Webhooks](https://www.standardwebhooks.com/) signature
/// scheme.
pub const WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
/// The delivery's time, in seconds since the Unix epoch.
pub const WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
/// Space-separated `v1,<base64 HMAC-SHA256>` signatures.
pub const WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");

/// A secret that cannot be used: not base64 after its optional `whsec_` prefix, or empty.
///
/// ```
/// assert!(idem_runtime::WebhookVerifier::new("provider", "whsec_???").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretError(String);

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SecretError {}

/// Verifies Standard Webhooks signatures of one sender: `webhook-signature` must hold a
/// `v1,` HMAC-SHA256 (keyed by the shared secret) of `{webhook-id}.{webhook-timestamp}.{body}`,
/// and the timestamp must be within the tolerance of now (5 minutes by default), so a
/// captured delivery cannot be replayed later with its old signature.
///
/// Register it with `App::app_data` (or on the webhook's resource or scope when several
/// senders post to one application) and take [`SignedWebhook`] as the handler's scope.
///
/// ```
/// use idem_runtime::WebhookVerifier;
///
/// let verifier = WebhookVerifier::new("provider", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
///     .unwrap();
/// let now = std::time::SystemTime::now()
///     .duration_since(std::time::UNIX_EPOCH)
///     .unwrap()
///     .as_secs() as i64;
/// let signature = verifier.sign("msg_1", now, b"{\"id\":1}");
/// assert!(signature.starts_with("v1,"));
/// assert!(verifier.verify("msg_1", &now.to_string(), &signature, b"{\"id\":1}").is_ok());
/// assert!(verifier.verify("msg_1", &now.to_string(), &signature, b"{\"id\":2}").is_err());
/// ```
#[derive(Clone)]
pub struct WebhookVerifier {
    sender: Arc<str>,
    /// Every secret accepted, the newest first: a sender rotating its secret signs with
    /// both for a while.
    secrets: Arc<[Vec<u8>]>,
    tolerance: Duration,
}

impl fmt::Debug for WebhookVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secrets.
        f.debug_struct("WebhookVerifier")
            .field("sender", &self.sender)
            .field("secrets", &self.secrets.len())
            .field("tolerance", &self.tolerance)
            .finish()
    }
}

impl WebhookVerifier {
    /// How far a delivery's timestamp may be from now (either way) by default.
    pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

    /// A verifier for `sender` (the scope of its events' keys) with its secret, base64
    /// with or without the `whsec_` prefix.
    ///
    /// ```
    /// let verifier = idem_runtime::WebhookVerifier::new("github", "c2VjcmV0").unwrap();
    /// assert_eq!(verifier.sender(), "github");
    /// ```
    pub fn new(sender: impl Into<String>, secret: &str) -> Result<Self, SecretError> {
        Ok(Self {
            sender: sender.into().into(),
            secrets: vec![decode_secret(secret)?].into(),
            tolerance: Self::DEFAULT_TOLERANCE,
        })
    }

    /// Also accepts signatures made with `secret`, e.g. the old one during a rotation.
    ///
    /// ```
    /// let verifier = idem_runtime::WebhookVerifier::new("provider", "bmV3")
    ///     .and_then(|v| v.also_accept("b2xk"))
    ///     .unwrap();
    /// # let _ = verifier;
    /// ```
    pub fn also_accept(self, secret: &str) -> Result<Self, SecretError> {
        let mut secrets = self.secrets.to_vec();
        secrets.push(decode_secret(secret)?);
        Ok(Self {
            secrets: secrets.into(),
            ..self
        })
    }

    /// How far a delivery's timestamp may be from now, either way (default 5 minutes).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let verifier = idem_runtime::WebhookVerifier::new("provider", "c2VjcmV0")
    ///     .unwrap()
    ///     .tolerance(Duration::from_secs(60));
    /// # let _ = verifier;
    /// ```
    pub fn tolerance(self, tolerance: Duration) -> Self {
        Self { tolerance, ..self }
    }

    /// The sender's name: the scope of its events' keys.
    pub fn sender(&self) -> &str {
        &self.sender
    }

    /// The `webhook-signature` value a sender with the first secret sends for this
    /// delivery: for a sender written in Rust, and for tests.
    ///
    /// ```
    /// let verifier = idem_runtime::WebhookVerifier::new("provider", "c2VjcmV0").unwrap();
    /// assert_eq!(verifier.sign("msg_1", 1_700_000_000, b"{}").len(), 3 + 44);
    /// ```
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mac = mac(&self.secrets[0], id, &timestamp.to_string(), body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }

    /// Checks one delivery, given its three headers' values and its body, against the
    /// clock now. `Ok` with the delivery's timestamp.
    ///
    /// ```
    /// let verifier = idem_runtime::WebhookVerifier::new("provider", "c2VjcmV0").unwrap();
    /// let error = verifier.verify("msg_1", "1", "v1,AAAA", b"{}").unwrap_err();
    /// assert!(error.to_string().contains("timestamp"), "{error}");
    /// ```
    pub fn verify(
        &self,
        id: &str,
        timestamp: &str,
        signatures: &str,
        body: &[u8],
    ) -> Result<i64, SignatureError> {
        let sent: i64 = timestamp
            .parse()
            .map_err(|_| SignatureError::new("the webhook-timestamp header is not an integer"))?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let tolerance = i64::try_from(self.tolerance.as_secs()).unwrap_or(i64::MAX);
        if now.abs_diff(sent) > tolerance.unsigned_abs() {
            return Err(SignatureError::new(format!(
                "the webhook-timestamp {sent} is more than {tolerance} s from the receiver's \
                 clock ({now}); a redelivery is signed anew with its own timestamp"
            )));
        }
        let candidates: Vec<Vec<u8>> = signatures
            .split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|encoded| STANDARD.decode(encoded).ok())
            .collect();
        if candidates.is_empty() {
            return Err(SignatureError::new(
                "the webhook-signature header holds no `v1,<base64>` signature",
            ));
        }
        for secret in self.secrets.iter() {
            let expected = mac(secret, id, timestamp, body);
            // verify_slice compares in constant time.
            if candidates
                .iter()
                .any(|candidate| expected.clone().verify_slice(candidate).is_ok())
            {
                return Ok(sent);
            }
        }
        Err(SignatureError::new(
            "no signature in webhook-signature matches the delivery's id, timestamp and body",
        ))
    }
}

fn decode_secret(secret: &str) -> Result<Vec<u8>, SecretError> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    match STANDARD.decode(encoded) {
        Ok(bytes) if !bytes.is_empty() => Ok(bytes),
        Ok(_) => Err(SecretError("the webhook secret is empty".to_owned())),
        Err(error) => Err(SecretError(format!(
            "the webhook secret is not base64 after its `whsec_` prefix: {error}"
        ))),
    }
}

fn mac(secret: &[u8], id: &str, timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any size");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// Why a delivery's signature was refused; answered 401 `webhook-signature-invalid`.
///
/// ```
/// let verifier = idem_runtime::WebhookVerifier::new("provider", "c2VjcmV0").unwrap();
/// assert!(verifier.verify("msg_1", "not a time", "v1,AAAA", b"").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureError(String);

impl SignatureError {
    fn new(detail: impl Into<String>) -> Self {
        Self(detail.into())
    }
}

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SignatureError {}

/// A delivery whose Standard Webhooks signature verified, by the [`WebhookVerifier`] in
/// the app data: the scope of a webhook handler's key is its sender. A delivery that does
/// not verify is answered before anything is stored: 401 `webhook-signature-invalid`, or
/// 400 `event-id-missing` without a `webhook-id` header.
///
/// ```ignore
/// #[post("/webhooks/provider")]
/// #[idempotent(scope = sender, key = header("webhook-id"), retention = "5d")]
/// async fn provider_event(sender: idem::SignedWebhook, tx: idem::Tx, event: web::Json<Event>)
///     -> Result<HttpResponse, AppError> { .. }
/// ```
///
/// In an `#[idempotent]` handler it reads the body idem has buffered, so extractors after
/// it read the body too; elsewhere it takes the body, which [`body`](Self::body) returns.
#[derive(Debug, Clone)]
pub struct SignedWebhook {
    sender: Arc<str>,
    id: String,
    timestamp: i64,
    body: Bytes,
}

impl SignedWebhook {
    /// The sender, as its verifier names it.
    pub fn sender(&self) -> &str {
        &self.sender
    }

    /// The `webhook-id` the signature covers.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The delivery's `webhook-timestamp`, in seconds since the Unix epoch.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The body the signature covers, exactly as received.
    pub fn body(&self) -> &Bytes {
        &self.body
    }
}

impl ScopeKey for SignedWebhook {
    fn scope_key(&self) -> std::borrow::Cow<'_, str> {
        self.sender().into()
    }
}

/// A delivery refused by [`SignedWebhook`]: a problem response.
#[derive(Debug)]
pub struct WebhookRejected {
    kind: ProblemKind,
    detail: String,
}

impl fmt::Display for WebhookRejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl ResponseError for WebhookRejected {
    fn status_code(&self) -> actix_web::http::StatusCode {
        self.kind.status()
    }

    fn error_response(&self) -> HttpResponse {
        self.kind.response(self.detail.clone())
    }
}

fn rejected(kind: ProblemKind, detail: impl Into<String>) -> WebhookRejected {
    WebhookRejected {
        kind,
        detail: detail.into(),
    }
}

impl FromRequest for SignedWebhook {
    type Error = WebhookRejected;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let verifier = req
            .app_data::<WebhookVerifier>()
            .or_else(|| req.app_data::<web::Data<WebhookVerifier>>().map(|d| &***d))
            .cloned();
        let buffered = req.extensions().get::<RawBody>().map(|raw| raw.0.clone());
        let body = match buffered {
            Some(body) => BodySource::Buffered(body),
            None => BodySource::Stream(web::Bytes::from_request(req, payload)),
        };
        let headers = req.headers().clone();
        Box::pin(async move {
            let Some(verifier) = verifier else {
                tracing::error!(
                    "no WebhookVerifier in the app data: register one with App::app_data"
                );
                return Err(rejected(
                    ProblemKind::NotConfigured,
                    "the server has no webhook verifier configured; this is a server bug",
                ));
            };
            let header = |name: &HeaderName| {
                headers
                    .get(name)
                    .and_then(|value| value.to_str().ok())
                    .map(str::to_owned)
            };
            let Some(id) = header(&WEBHOOK_ID) else {
                return Err(rejected(
                    ProblemKind::EventIdMissing,
                    "a signed webhook delivery carries its event id in the webhook-id header, \
                     and this request has none",
                ));
            };
            let (Some(timestamp), Some(signatures)) =
                (header(&WEBHOOK_TIMESTAMP), header(&WEBHOOK_SIGNATURE))
            else {
                return Err(rejected(
                    ProblemKind::SignatureInvalid,
                    "a signed webhook delivery carries webhook-timestamp and webhook-signature \
                     headers, and this request lacks one",
                ));
            };
            let body = match body {
                BodySource::Buffered(body) => body,
                BodySource::Stream(future) => future.await.map_err(|error| {
                    rejected(
                        ProblemKind::BodyInvalid,
                        format!("the body could not be read: {error}"),
                    )
                })?,
            };
            let timestamp = verifier
                .verify(&id, &timestamp, &signatures, &body)
                .map_err(|error| {
                    tracing::warn!(sender = verifier.sender(), %error, "webhook signature refused");
                    rejected(ProblemKind::SignatureInvalid, error.to_string())
                })?;
            Ok(Self {
                sender: Arc::clone(&verifier.sender),
                id,
                timestamp,
                body,
            })
        })
    }
}

enum BodySource {
    Buffered(Bytes),
    Stream(<Bytes as FromRequest>::Future),
}

/// Makes the raw body readable by [`SignedWebhook`] without taking it from the payload.
pub(crate) fn keep_raw_body(req: &HttpRequest, body: &Bytes) {
    req.extensions_mut().insert(RawBody(body.clone()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            .try_into()
            .unwrap()
    }

    /// The test vector of the Standard Webhooks specification.
    #[test]
    fn the_specifications_example_signature() {
        let verifier = WebhookVerifier::new("x", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            verifier.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn a_signature_verifies_once_rotated_and_not_when_stale_or_altered() {
        let old = WebhookVerifier::new("p", "b2xkLXNlY3JldA==").unwrap();
        let new = WebhookVerifier::new("p", "bmV3LXNlY3JldA==")
            .unwrap()
            .also_accept("b2xkLXNlY3JldA==")
            .unwrap();
        let t = now();
        let signed = old.sign("evt_1", t, b"{}");
        assert_eq!(new.verify("evt_1", &t.to_string(), &signed, b"{}"), Ok(t));
        // Several signatures, one of them good.
        let many = format!("v1,AAAA {signed}");
        assert!(new.verify("evt_1", &t.to_string(), &many, b"{}").is_ok());
        assert!(new.verify("evt_2", &t.to_string(), &signed, b"{}").is_err());
        let stale = t - 3600;
        let signed = old.sign("evt_1", stale, b"{}");
        let error = old
            .verify("evt_1", &stale.to_string(), &signed, b"{}")
            .unwrap_err();
        assert!(error.to_string().contains("more than 300 s"), "{error}");
    }
}
