//! `POST /notifications`: a message sent through the example's notification provider, an
//! effect that lives only at the provider. No row of the service's database changes, so
//! there is no business write for idem's key to commit with: this endpoint keeps its keys
//! in Redis (`#[idempotent(store = redis, ..)]`, `idem::redis::Steps`), and only when
//! `REDIS_URL` is set; without it the route is not registered (404).
//!
//! The provider deduplicates by the key its caller sends, as messaging providers do with
//! an idempotency key; the handler sends with the key idem derives for its step `send`, so
//! a retry that takes over an attempt whose output was not recorded sends the same
//! message, not a second one.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::body::{JsonBody, fields};
use super::orders::Account;
use super::problem::Problem;

/// The longest recipient and text a notification may have, in characters.
const MAX_TO: usize = 254;
const MAX_TEXT: usize = 1000;

/// The example's notification provider. It lives in the service's process, in memory
/// (unlike the payment provider, whose charges are rows of the example's database), so
/// that nothing about a notification is in the relational database, which is what makes
/// Redis the right store for its keys; a real one is an HTTP API (an e-mail or SMS
/// provider) that deduplicates by the `Idempotency-Key` it is sent, the same way.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    /// Messages sent, by the key their caller gave.
    sent: Mutex<HashMap<String, Message>>,
    /// Calls that reached the provider, repeated keys included.
    calls: AtomicUsize,
}

/// A message as the provider answers it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Message {
    pub(crate) id: String,
    pub(crate) to: String,
    pub(crate) text: String,
}

impl Notifier {
    /// Sends once per `key`: a repeated key answers the first message and sends nothing.
    pub(crate) fn send(&self, key: &str, to: &str, text: &str) -> Message {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut sent = self
            .sent
            .lock()
            .expect("the provider's lock is not poisoned");
        let next = sent.len() + 1;
        sent.entry(key.to_owned())
            .or_insert_with(|| Message {
                id: format!("msg_{next}"),
                to: to.to_owned(),
                text: text.to_owned(),
            })
            .clone()
    }

    /// Calls the provider received, repeated keys included.
    #[allow(dead_code)] // the tests count the provider's calls; the binaries do not
    pub(crate) fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Messages the provider sent: one per distinct key.
    #[allow(dead_code)] // as `calls`
    pub(crate) fn sent(&self) -> usize {
        self.sent
            .lock()
            .expect("the provider's lock is not poisoned")
            .len()
    }
}

/// What `POST /notifications` is served with: idem on Redis and the provider. `None` in
/// the service when `REDIS_URL` is not set.
#[derive(Debug, Clone)]
pub(crate) struct Notifications {
    pub(crate) idem: idem::redis::RedisIdem,
    pub(crate) notifier: Arc<Notifier>,
}

impl Notifications {
    /// Keys in `store`, answered with `settings` (those of the service's `Idem`, so both
    /// stores answer alike).
    pub(crate) fn new(store: idem::redis::RedisStore, settings: idem::Settings) -> Self {
        Self {
            idem: idem::redis::RedisIdem::new(store).with_settings(settings),
            notifier: Arc::new(Notifier::default()),
        }
    }
}

/// The body of `POST /notifications`, checked while it is extracted (before idem claims
/// the key, so a rejected body leaves the key unused).
#[derive(Debug)]
pub(crate) struct NewNotification {
    to: String,
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewNotificationFields {
    to: String,
    text: String,
}

impl JsonBody for NewNotification {
    type Error = NotificationError;

    fn unsupported_media_type() -> NotificationError {
        NotificationError::UnsupportedMediaType
    }

    fn malformed(detail: String) -> NotificationError {
        NotificationError::MalformedBody(detail)
    }

    fn invalid(detail: String) -> NotificationError {
        NotificationError::Invalid(detail)
    }

    fn parse(body: &[u8]) -> Result<Self, NotificationError> {
        let fields: NewNotificationFields = fields::<Self, _>(body)?;
        for (field, value, max) in [("to", &fields.to, MAX_TO), ("text", &fields.text, MAX_TEXT)] {
            let length = value.chars().count();
            if !(1..=max).contains(&length) {
                return Err(NotificationError::Invalid(format!(
                    "{field} must be 1 to {max} characters, not {length}"
                )));
            }
        }
        Ok(Self {
            to: fields.to,
            text: fields.text,
        })
    }
}

/// The answer of `POST /notifications`: the message the provider sent.
#[derive(Debug, Serialize)]
pub(crate) struct Notification {
    id: String,
    account_id: i64,
    to: String,
    text: String,
}

/// Sends the notification in one recorded step, `sent`, with the key idem derives for
/// `send`: a retry after the step was recorded gets its output without calling the
/// provider; one after the call but before the record calls again with the same key, and
/// the provider answers the first message.
pub(crate) async fn notify(
    account: Account,
    steps: &mut idem::redis::Steps,
    notifier: &Notifier,
    notification: &NewNotification,
) -> Result<Notification, NotificationError> {
    let key = steps.derived_key("send");
    let message = steps
        .run("sent", async || {
            Ok::<_, NotificationError>(notifier.send(&key, &notification.to, &notification.text))
        })
        .await?;
    Ok(Notification {
        id: message.id,
        account_id: account.id(),
        to: message.to,
        text: message.text,
    })
}

/// Everything `POST /notifications` answers besides success.
#[derive(Debug)]
pub(crate) enum NotificationError {
    /// 400: the body is not JSON.
    MalformedBody(String),
    /// 415: the body is not sent as JSON.
    UnsupportedMediaType,
    /// 422: JSON, but not a valid notification.
    Invalid(String),
    /// idem could not run or record the step (Redis failed, or a retry took the attempt
    /// over); idem answers for it.
    Step(idem::phased::PhaseError),
}

impl NotificationError {
    fn slug(&self) -> &'static str {
        match self {
            Self::MalformedBody(_) => "malformed-body",
            Self::UnsupportedMediaType => "unsupported-media-type",
            Self::Invalid(_) => "invalid-notification",
            Self::Step(_) => "internal-error",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Self::MalformedBody(_) => "Malformed request body",
            Self::UnsupportedMediaType => "Unsupported media type",
            Self::Invalid(_) => "Invalid notification",
            Self::Step(_) => "Internal error",
        }
    }

    fn detail(&self) -> String {
        match self {
            Self::MalformedBody(detail) | Self::Invalid(detail) => detail.clone(),
            Self::UnsupportedMediaType => "send the notification as application/json".to_owned(),
            Self::Step(_) => "the request failed; retry it with the same key".to_owned(),
        }
    }

    /// The HTTP status of every kind but [`Step`](Self::Step), whose status is idem's.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Self::MalformedBody(_) => 400,
            Self::UnsupportedMediaType => 415,
            Self::Invalid(_) => 422,
            Self::Step(_) => 500,
        }
    }

    /// The answer to send, or the [`idem::phased::PhaseError`] whose own answer idem gives.
    pub(crate) fn problem(&self) -> Result<Problem, &idem::phased::PhaseError> {
        match self {
            Self::Step(error) => Err(error),
            other => Ok(Problem::new(
                other.status(),
                other.slug(),
                other.title(),
                &other.detail(),
            )),
        }
    }
}

impl fmt::Display for NotificationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Step(error) => write!(f, "{error}"),
            other => f.write_str(&other.detail()),
        }
    }
}

/// Lets `?` pass idem's step failures up; idem replaces the response with its own.
impl From<idem::phased::PhaseError> for NotificationError {
    fn from(error: idem::phased::PhaseError) -> Self {
        Self::Step(error)
    }
}
