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

use crate::protocol::headers::{Headers, as_text};
use crate::protocol::key::{IdempotencyKey, KeyError, KeySource, MAX_KEY_LEN};
use crate::protocol::outcome::Outcome;
use crate::protocol::policy::Policy;
use crate::protocol::problem::{Problem, ProblemKind};

pub(crate) mod verify;

pub use verify::{
    SecretError, SignatureError, SignedWebhook, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP,
    WebhookRejected, WebhookVerifier,
};

/// Whether `policy`'s key is what a signed webhook's sender signed: the `webhook-id`
/// header, or a field of the (signed) body.
pub(crate) fn key_is_signed(policy: &Policy) -> bool {
    match policy.key_source() {
        Some(KeySource::Header(name)) => name.eq_ignore_ascii_case(WEBHOOK_ID.as_str()),
        Some(KeySource::Json(_)) => true,
        None => false,
    }
}

/// The request's key as `policy` says where it is; for a problem, the answer and the
/// outcome to record.
pub(crate) fn key_of(
    policy: &Policy,
    headers: &(impl Headers + ?Sized),
    content: &[u8],
) -> Result<IdempotencyKey, (Problem, Outcome)> {
    let Some(source) = policy.key_source() else {
        return IdempotencyKey::from_headers(headers).map_err(|error| {
            let kind = match error {
                KeyError::Missing => ProblemKind::KeyMissing,
                _ => ProblemKind::KeyInvalid,
            };
            (kind.problem(error.to_string()), Outcome::InvalidKey)
        });
    };
    let value = match source {
        KeySource::Header(name) => header_value(headers, name, source)?,
        KeySource::Json(field) => json_value(content, field, source)?,
    };
    IdempotencyKey::exact(&value).map_err(|error| {
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
            ProblemKind::EventIdInvalid.problem(detail),
            Outcome::InvalidKey,
        )
    })
}

fn header_value(
    headers: &(impl Headers + ?Sized),
    name: &str,
    source: KeySource,
) -> Result<String, (Problem, Outcome)> {
    let Some((value, repeated)) = headers.lookup(name) else {
        return Err(missing(format!(
            "this endpoint takes the event's id from {source}, and the request has none"
        )));
    };
    if repeated {
        return Err((
            ProblemKind::EventIdInvalid.problem(format!("{source} must appear exactly once")),
            Outcome::InvalidKey,
        ));
    }
    match as_text(value) {
        Some(text) => Ok(text.to_owned()),
        None => Err((
            ProblemKind::EventIdInvalid.problem(format!(
                "the event id in {source} must be visible ASCII characters ('!' to '~')"
            )),
            Outcome::InvalidKey,
        )),
    }
}

fn json_value(
    content: &[u8],
    field: &str,
    source: KeySource,
) -> Result<String, (Problem, Outcome)> {
    let document: serde_json::Value = serde_json::from_slice(content).map_err(|error| {
        (
            ProblemKind::BodyInvalid.problem(format!(
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
            ProblemKind::EventIdInvalid.problem(format!(
                "the event id in {source} must be a string or an integer"
            )),
            Outcome::InvalidKey,
        )),
        None => Err(missing(format!(
            "this endpoint takes the event's id from {source}, and the body has none"
        ))),
    }
}

fn missing(detail: String) -> (Problem, Outcome) {
    (
        ProblemKind::EventIdMissing.problem(detail),
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
