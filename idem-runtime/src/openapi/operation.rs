//! One operation's documentation as its policy declares it: the key header, the
//! description, and the published policy (`x-idempotency`).

use utoipa::openapi::extensions::ExtensionsBuilder;
use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{RefOr, Required};

use super::responses::document_responses;
use crate::protocol::key::MAX_KEY_LEN;
use crate::protocol::policy::Policy;

/// Documents one operation as `policy` declares it: the key header, the published
/// policy, the `Idempotent-Replayed` header and idem's problem responses. The
/// `IdempotencyProblem` schema it refers to is added by
/// [`IdempotencyDocs`](super::IdempotencyDocs); call this directly only for an operation
/// it cannot match, and add [`problem_schema`](super::problem_schema) yourself.
///
/// ```
/// use utoipa::openapi::path::Operation;
///
/// static POLICY: idem_runtime::Policy =
///     idem_runtime::Policy::new("create_order", "shop", "account", 86_400);
/// let mut operation = Operation::new();
/// idem_runtime::openapi::document_operation(&mut operation, &POLICY);
/// assert!(operation.responses.responses.contains_key("409"));
///
/// // A phased handler also publishes its lease.
/// static PHASED: idem_runtime::Policy =
///     idem_runtime::Policy::new("pay", "shop", "account", 86_400).with_lease(30_000);
/// let mut operation = Operation::new();
/// idem_runtime::openapi::document_operation(&mut operation, &PHASED);
/// let extensions = serde_json::to_value(&operation.extensions).unwrap();
/// assert_eq!(extensions["x-idempotency"]["lease_ms"], 30_000);
/// ```
pub fn document_operation(operation: &mut Operation, policy: &Policy) {
    let retention = policy.retention().as_secs();
    let readable = readable_duration(retention);

    let key_schema = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        // The longest header value that still decodes to a key of MAX_KEY_LEN: quoted, with
        // every character escaped. The pattern bounds the key itself.
        .max_length(Some(2 + 2 * MAX_KEY_LEN))
        .pattern(Some(key_pattern()))
        .examples(["8e03978e-40d5-43e8-bc93-6894a57f9324"]);
    let key = ParameterBuilder::new()
        .name("Idempotency-Key")
        .parameter_in(ParameterIn::Header)
        .required(Required::True)
        .description(Some(format!(
            "One key per logical operation, chosen by the client (a UUID is a good choice) \
             and sent again unchanged on every retry of it: 1 to {MAX_KEY_LEN} visible ASCII \
             characters, bare or as a Structured Field string (`\"...\"`, the same key). \
             Keys are scoped by `{scope}` and kept for {readable}: within that time a retry \
             gets the stored response instead of running the operation again.",
            scope = policy.scope()
        )))
        .schema(Some(key_schema))
        .build();
    // A webhook handler's key is the event's id, from a header or the body.
    let source = policy.key_source();
    let key = match source {
        None => Some(key),
        Some(crate::KeySource::Header(name)) => Some(
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Header)
                .required(Required::True)
                .description(Some(format!(
                    "The event's id, the same on every delivery of the event: 1 to \
                     {MAX_KEY_LEN} visible ASCII characters. The first delivery runs the \
                     operation; a redelivery within {readable} gets the stored response."
                )))
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .min_length(Some(1))
                        .max_length(Some(2 + 2 * MAX_KEY_LEN))
                        .pattern(Some(key_pattern())),
                ))
                .build(),
        ),
        Some(crate::KeySource::Json(_)) => None,
    };
    let parameters = operation.parameters.get_or_insert_with(Vec::new);
    if let Some(key) = key {
        let name = key.name.clone();
        parameters.retain(|p| !matches!(p, RefOr::T(p) if p.name.eq_ignore_ascii_case(&name)));
        parameters.push(RefOr::T(key));
    }

    let note = match source {
        Some(source) => format!(
            "**Idempotent per event.** The key is the event's id, from {source}; the first \
             delivery of an event runs the operation and a redelivery gets the stored \
             response again, with `Idempotent-Replayed: true`. Keys are scoped by `{}` and \
             expire {readable} after first use. The same id with a different body gets 422.",
            policy.scope()
        ),
        None => format!(
            "**Idempotent.** Send an `Idempotency-Key` header; the operation runs once per key \
         and a retry with the same key and request gets the stored response again, with \
         `Idempotent-Replayed: true`. Keys are scoped by `{}` and expire {readable} after \
         first use. The same key with a different method, path or body gets 422.",
            policy.scope()
        ),
    };
    operation.description = Some(match operation.description.take() {
        Some(text) if !text.is_empty() => format!("{text}\n\n{note}"),
        _ => note,
    });
    let mut published = serde_json::json!({
        "header": "Idempotency-Key",
        "required": true,
        "scope": policy.scope(),
        "retention": iso_duration(retention),
        "retention_seconds": retention,
        "fingerprint": "method, path, query parameters by name, and body decoded from its Content-Encoding (JSON canonicalized with exact numbers, form fields by name)",
        "key_max_length": MAX_KEY_LEN,
    });
    match source {
        Some(crate::KeySource::Header(name)) => published["header"] = serde_json::json!(name),
        Some(crate::KeySource::Json(field)) => {
            published["header"] = serde_json::Value::Null;
            published["body_field"] = serde_json::json!(field);
        }
        None => {}
    }
    // The phased form: how long a crashed attempt holds the key before a retry resumes it.
    if let Some(lease) = policy.lease() {
        published["lease_ms"] = serde_json::json!(lease.as_millis());
    }
    let extension = ExtensionsBuilder::new()
        .add("x-idempotency", published)
        .build();
    match operation.extensions.as_mut() {
        Some(extensions) => extensions.merge(extension),
        None => operation.extensions = Some(extension),
    }

    document_responses(operation, source.is_some());
}

/// The header values `IdempotencyKey::parse` accepts, as an ECMA-262 pattern for
/// schema-driven clients and testers: a bare key of visible ASCII that does not start
/// with a quote (one that does is read as a Structured Field string), or a Structured
/// Field string of visible ASCII with `"` and `\` escaped (its key then 1 to 255 long).
fn key_pattern() -> String {
    format!(
        r#"^(?:[!#-~][!-~]{{0,{rest}}}|"(?:[!#-\[\]-~]|\\["\\]){{1,{MAX_KEY_LEN}}}")$"#,
        rest = MAX_KEY_LEN - 1
    )
}

/// `86400` as `24 hours`, `172800` as `2 days`.
fn readable_duration(secs: u64) -> String {
    let (n, unit) = match secs {
        s if s % 86_400 == 0 => (s / 86_400, "day"),
        s if s % 3_600 == 0 => (s / 3_600, "hour"),
        s if s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// An ISO 8601 duration: `P1D`, `PT36H`, `PT90S`.
fn iso_duration(secs: u64) -> String {
    match secs {
        s if s % 86_400 == 0 => format!("P{}D", s / 86_400),
        s if s % 3_600 == 0 => format!("PT{}H", s / 3_600),
        s if s % 60 == 0 => format!("PT{}M", s / 60),
        s => format!("PT{s}S"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(readable_duration(86_400), "1 day");
        assert_eq!(readable_duration(36 * 3_600), "36 hours");
        assert_eq!(iso_duration(86_400), "P1D");
        assert_eq!(iso_duration(36 * 3_600), "PT36H");
        assert_eq!(iso_duration(90), "PT90S");
    }
}
