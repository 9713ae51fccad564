//! Standard Webhooks signatures: the verifier, and a delivery that verified.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use http::HeaderName;
use sha2::Sha256;

use crate::protocol::headers::{Headers, first_text};
use crate::protocol::problem::{Problem, ProblemKind};
use crate::protocol::scope::ScopeKey;

/// The headers of the [Standard Webhooks](https://www.standardwebhooks.com/) signature
/// scheme.
pub const WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
/// The delivery's time, in seconds since the Unix epoch.
pub const WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
/// Space-separated `v1,<base64 HMAC-SHA256>` signatures.
pub const WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");

/// A secret that cannot be used: not base64 after its optional `whsec_` prefix, or
/// shorter than [`WebhookVerifier::MIN_SECRET_BYTES`] once decoded.
///
/// ```
/// assert!(idem_runtime::WebhookVerifier::new("provider", "whsec_???").is_err());
/// // "fifteen-bytes!!": one byte short.
/// assert!(idem_runtime::WebhookVerifier::new("provider", "ZmlmdGVlbi1ieXRlcyEh").is_err());
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
/// Register it with the framework (actix-web: `App::app_data`, or on the webhook's
/// resource or scope when several senders post to one application; axum:
/// `Router::layer(axum::Extension(verifier))`, or `route_layer` on the webhook's route)
/// and take [`SignedWebhook`] as the handler's scope.
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

    /// The shortest secret accepted, in bytes once decoded: 16 (128 bits). An HMAC is no
    /// stronger than its key (NIST SP 800-107 Rev. 1, section 5.3.4), and 128 bits is the
    /// strength NIST SP 800-57 Part 1 asks of keys used past 2030. Standard Webhooks
    /// senders issue 24 bytes and more (the specification's test vector has 24).
    pub const MIN_SECRET_BYTES: usize = 16;

    /// The longest tolerance accepted: just under [`Policy::MIN_RETENTION`]. A delivery is
    /// accepted for as long as its timestamp is within the tolerance, and its key must
    /// still be kept then, or a replay of it would run the handler again; every policy
    /// keeps keys at least that long, so this bound holds for every handler.
    ///
    /// [`Policy::MIN_RETENTION`]: crate::Policy::MIN_RETENTION
    pub const MAX_TOLERANCE: Duration =
        Duration::from_secs(crate::Policy::MIN_RETENTION.as_secs() - 1);

    /// A verifier for `sender` (the scope of its events' keys) with its secret, base64
    /// with or without the `whsec_` prefix.
    ///
    /// ```
    /// let verifier = idem_runtime::WebhookVerifier::new("github", "ZG9jLWV4YW1wbGUtc2VjcmV0LTIwMjY=").unwrap();
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
    /// let verifier = idem_runtime::WebhookVerifier::new("provider", "bmV3LXNlY3JldC1vZi10aGUtc2VuZGVy")
    ///     .and_then(|v| v.also_accept("b2xkLXNlY3JldC1vZi10aGUtc2VuZGVy"))
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
    /// # Panics
    ///
    /// When `tolerance` is over [`MAX_TOLERANCE`](Self::MAX_TOLERANCE): a delivery would
    /// then still be accepted after its key may have expired.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let verifier = idem_runtime::WebhookVerifier::new("provider", "ZG9jLWV4YW1wbGUtc2VjcmV0LTIwMjY=")
    ///     .unwrap()
    ///     .tolerance(Duration::from_secs(60));
    /// # let _ = verifier;
    /// ```
    pub fn tolerance(self, tolerance: Duration) -> Self {
        assert!(
            tolerance <= Self::MAX_TOLERANCE,
            "a webhook tolerance of {tolerance:?} outlasts the shortest retention of a key \
             (24h), so a replay could come back after its key expired: keep it under a day, \
             e.g. 5 minutes"
        );
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
    /// let verifier = idem_runtime::WebhookVerifier::new("provider", "ZG9jLWV4YW1wbGUtc2VjcmV0LTIwMjY=").unwrap();
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
    /// let verifier = idem_runtime::WebhookVerifier::new("provider", "ZG9jLWV4YW1wbGUtc2VjcmV0LTIwMjY=").unwrap();
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
        Ok(bytes) if bytes.len() >= WebhookVerifier::MIN_SECRET_BYTES => Ok(bytes),
        Ok(bytes) => Err(SecretError(format!(
            "the webhook secret is {} bytes long once decoded, and at least {} are needed: \
             use the secret the sender issued (`whsec_` and base64)",
            bytes.len(),
            WebhookVerifier::MIN_SECRET_BYTES
        ))),
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
/// let verifier = idem_runtime::WebhookVerifier::new("provider", "ZG9jLWV4YW1wbGUtc2VjcmV0LTIwMjY=").unwrap();
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
/// the app data (axum: the request's extensions): the scope of a webhook handler's key is its sender. A delivery that does
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
/// it read the body too; elsewhere it takes the body, which [`body`](Self::body) returns
/// (actix-web), or answers 500 `not-configured` (axum, where it reads the request's head
/// only: there it verifies in `#[idem::axum::idempotent]` handlers and behind
/// `idem::axum::IdempotencyLayer`).
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

/// The sender's name; stored as `webhook:<sender>`, apart from every scope of the
/// application's own.
impl ScopeKey for SignedWebhook {
    fn scope_key(&self) -> std::borrow::Cow<'_, str> {
        self.sender().into()
    }

    const SIGNED_SENDER: bool = true;
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

fn rejected(kind: ProblemKind, detail: impl Into<String>) -> WebhookRejected {
    WebhookRejected {
        kind,
        detail: detail.into(),
    }
}

impl WebhookRejected {
    /// The problem answered for the refused delivery.
    ///
    /// ```
    /// # fn f(rejected: &idem_runtime::WebhookRejected) {
    /// assert!(rejected.problem().status().is_client_error() || rejected.problem().status() == 500);
    /// # }
    /// ```
    pub fn problem(&self) -> Problem {
        self.kind.problem(self.detail.clone())
    }

    /// No [`WebhookVerifier`] is registered where the handler runs: a server bug. `how`
    /// names the framework's way to register one, for the log.
    pub(crate) fn not_configured(how: &str) -> Self {
        tracing::error!("no WebhookVerifier where the handler runs: register one with {how}");
        Self::server_bug("the server has no webhook verifier configured; this is a server bug")
    }

    /// The server is set up so that no delivery can verify: 500 `not-configured`.
    pub(crate) fn server_bug(detail: &str) -> Self {
        rejected(ProblemKind::NotConfigured, detail)
    }

    /// The body could not be read to verify it (actix-web streams it to the extractor;
    /// axum's adapter hands over the buffered bytes, which cannot fail).
    #[cfg(feature = "actix")]
    pub(crate) fn unreadable_body(error: impl fmt::Display) -> Self {
        rejected(
            ProblemKind::BodyInvalid,
            format!("the body could not be read: {error}"),
        )
    }
}

/// The body as received, which an adapter puts in the request's extensions once it has
/// buffered it, so that [`SignedWebhook`]'s extractor verifies the exact bytes without
/// taking the body from the extractors after it.
#[derive(Clone, Debug)]
pub(crate) struct RawBody(pub(crate) Bytes);

/// The signature headers of a delivery, read before its body.
#[derive(Debug)]
pub(crate) struct Delivery {
    id: String,
    timestamp: String,
    signatures: String,
}

impl Delivery {
    /// Reads the id, timestamp and signatures, or refuses the delivery without them.
    pub(crate) fn read(headers: &(impl Headers + ?Sized)) -> Result<Self, WebhookRejected> {
        let header = |name: &HeaderName| first_text(headers, name.as_str()).map(str::to_owned);
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
        Ok(Self {
            id,
            timestamp,
            signatures,
        })
    }

    /// Verifies the delivery's signature over `body` with `verifier`.
    pub(crate) fn verify(
        self,
        verifier: &WebhookVerifier,
        body: Bytes,
    ) -> Result<SignedWebhook, WebhookRejected> {
        let timestamp = verifier
            .verify(&self.id, &self.timestamp, &self.signatures, &body)
            .map_err(|error| {
                tracing::warn!(sender = verifier.sender(), %error, "webhook signature refused");
                rejected(ProblemKind::SignatureInvalid, error.to_string())
            })?;
        Ok(SignedWebhook {
            sender: Arc::clone(&verifier.sender),
            id: self.id,
            timestamp,
            body,
        })
    }
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

    #[test]
    fn a_secret_shorter_than_sixteen_bytes_is_refused_at_construction() {
        let fifteen = STANDARD.encode(b"fifteen-bytes!!");
        let sixteen = STANDARD.encode(b"sixteen-bytes!!!");
        let error = WebhookVerifier::new("p", &fifteen).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the webhook secret is 15 bytes long once decoded, and at least 16 are needed: \
             use the secret the sender issued (`whsec_` and base64)"
        );
        assert!(WebhookVerifier::new("p", &format!("whsec_{sixteen}")).is_ok());
        let verifier = WebhookVerifier::new("p", &sixteen).unwrap();
        assert!(verifier.also_accept("").is_err());
    }

    #[test]
    fn a_tolerance_up_to_the_shortest_retention_is_accepted() {
        let verifier = WebhookVerifier::new("p", &STANDARD.encode(b"sixteen-bytes!!!")).unwrap();
        let verifier = verifier.tolerance(WebhookVerifier::MAX_TOLERANCE);
        assert!(verifier.tolerance < crate::Policy::MIN_RETENTION);
    }

    #[test]
    #[should_panic(expected = "outlasts the shortest retention of a key")]
    fn a_tolerance_as_long_as_a_retention_is_refused() {
        let verifier = WebhookVerifier::new("p", &STANDARD.encode(b"sixteen-bytes!!!")).unwrap();
        let _ = verifier.tolerance(crate::Policy::MIN_RETENTION);
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
        let old = WebhookVerifier::new("p", "b2xkLXNlY3JldC1vZi10aGUtc2VuZGVy").unwrap();
        let new = WebhookVerifier::new("p", "bmV3LXNlY3JldC1vZi10aGUtc2VuZGVy")
            .unwrap()
            .also_accept("b2xkLXNlY3JldC1vZi10aGUtc2VuZGVy")
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
