//! OpenAPI documentation of idempotent operations, with [utoipa](https://docs.rs/utoipa)
//! (feature `openapi`).
//!
//! Add [`IdempotencyDocs`] to the `modifiers` of your `#[derive(OpenApi)]` document.
//! Every operation of an `#[idempotent]` handler then documents, without a line of it
//! written by hand:
//!
//! - the `Idempotency-Key` request header: required, 1 to 255 visible ASCII characters,
//!   bare or as a Structured Field string, with the key's retention in its description
//!   and a `pattern` that accepts exactly the values the server does;
//! - the idempotency policy the IETF draft asks a resource to publish, as the operation's
//!   `x-idempotency` extension: the header, the scope parameter, the retention (ISO 8601
//!   and seconds), what the fingerprint covers and, for the phased form, the lease in ms;
//!   and a paragraph of its description;
//! - the `Idempotent-Replayed: true` header on the responses the handler documents,
//!   except 5xx ones (a replay may carry any other; a 5xx is never stored);
//! - the problem responses idem answers itself, `application/problem+json` with the
//!   `IdempotencyProblem` schema: 400 (key missing or invalid, body not JSON or not
//!   decodable), 409 (in progress, with `Retry-After`), 413 (body over idem's limit), 422
//!   (key reused for a different request), 500 (an outcome idem could not store or
//!   replay) and 503 (key store unavailable or, on SQLite, busy; with `Retry-After`). A
//!   status the handler already documents keeps its description, with idem's meaning
//!   added to it.
//!
//! An operation is matched to its handler by method and path when `#[idempotent]` could
//! see the route (written above the route attribute, see [`Policy::route`]), else by its
//! `operationId`, which `#[utoipa::path]` sets to the handler's name. Under a
//! `web::scope` prefix the route does not match the document's path: the `operationId`
//! still does.
//!
//! ```
//! use actix_web::{HttpResponse, post};
//! use idem_runtime::openapi::IdempotencyDocs;
//! use utoipa::OpenApi;
//!
//! #[derive(OpenApi)]
//! #[openapi(paths(create_order), modifiers(&IdempotencyDocs))]
//! struct ApiDoc;
//!
//! #[utoipa::path(post, path = "/orders", responses((status = 201, description = "Created")))]
//! #[post("/orders")]
//! async fn create_order() -> HttpResponse {
//!     // In an application: `#[idem::idempotent(scope = account)]` on this handler.
//!     HttpResponse::Created().finish()
//! }
//!
//! let json = ApiDoc::openapi().to_json().unwrap();
//! println!("{json}");
//! ```

use utoipa::Modify;
use utoipa::openapi::extensions::ExtensionsBuilder;
use utoipa::openapi::header::{Header, HeaderBuilder};
use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Required};

use crate::protocol::key::MAX_KEY_LEN;
use crate::protocol::policy::Policy;
use crate::protocol::problem::{PROBLEM_JSON, ProblemKind};

/// The name of the problem schema in `components.schemas`.
///
/// ```
/// assert_eq!(idem_runtime::openapi::PROBLEM_SCHEMA, "IdempotencyProblem");
/// ```
pub const PROBLEM_SCHEMA: &str = "IdempotencyProblem";

/// A utoipa [`Modify`] that documents every `#[idempotent]` operation of the program
/// (the handlers [`policies`](crate::policies) lists) in the document it modifies; see
/// the [module documentation](self).
///
/// ```
/// use utoipa::Modify;
///
/// let mut document = utoipa::openapi::OpenApiBuilder::new().build();
/// idem_runtime::openapi::IdempotencyDocs.modify(&mut document);
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct IdempotencyDocs;

impl Modify for IdempotencyDocs {
    fn modify(&self, openapi: &mut OpenApi) {
        let policies = crate::policies();
        let mut documented = false;
        for (path, item) in openapi.paths.paths.iter_mut() {
            for (method, operation) in unsafe_methods(item) {
                let policy = policies.iter().find(|policy| {
                    let by_route = policy.route().is_some_and(|(m, p)| {
                        m.eq_ignore_ascii_case(method) && route_template(p) == *path
                    });
                    by_route || operation.operation_id.as_deref() == Some(policy.handler())
                });
                if let Some(policy) = policy {
                    document_operation(operation, policy);
                    documented = true;
                }
            }
        }
        if documented {
            openapi
                .components
                .get_or_insert_with(Default::default)
                .schemas
                .insert(PROBLEM_SCHEMA.to_owned(), problem_schema());
        }
    }
}

/// The operations of the methods `#[idempotent]` accepts, with their method names.
fn unsafe_methods(item: &mut PathItem) -> impl Iterator<Item = (&'static str, &mut Operation)> {
    [
        ("POST", item.post.as_mut()),
        ("PUT", item.put.as_mut()),
        ("PATCH", item.patch.as_mut()),
        ("DELETE", item.delete.as_mut()),
    ]
    .into_iter()
    .filter_map(|(method, operation)| Some((method, operation?)))
}

/// An actix path pattern as an OpenAPI path template: `{id:\d+}` becomes `{id}`.
fn route_template(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut depth = 0_u32;
    let mut in_regex = false;
    for c in pattern.chars() {
        match c {
            '{' => {
                depth += 1;
                if !in_regex {
                    out.push(c);
                }
            }
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    in_regex = false;
                    out.push(c);
                } else if !in_regex {
                    out.push(c);
                }
            }
            ':' if depth == 1 => in_regex = true,
            _ if in_regex => {}
            _ => out.push(c),
        }
    }
    out
}

/// Documents one operation as `policy` declares it: the key header, the published
/// policy, the `Idempotent-Replayed` header and idem's problem responses. The
/// `IdempotencyProblem` schema it refers to is added by [`IdempotencyDocs`]; call this
/// directly only for an operation it cannot match, and add [`problem_schema`] yourself.
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

    let replayed = replayed_header();
    // A 5xx is never stored, so never replayed; any other answer of the handler may be.
    let replayable = |status: &str| !status.starts_with('5');
    for (status, response) in operation.responses.responses.iter_mut() {
        if let (true, RefOr::T(response)) = (replayable(status), response) {
            response
                .headers
                .insert("Idempotent-Replayed".to_owned(), RefOr::T(replayed.clone()));
        }
    }
    let retry_after = HeaderBuilder::new()
        .schema(Some(ObjectBuilder::new().schema_type(Type::Integer)))
        .description(Some("Seconds to wait before retrying with the same key"))
        .build();
    for (status, text, kinds, extra_header) in [
        (
            "400",
            if source.is_some() {
                "The event's id is missing or malformed, or the body does not parse as JSON or \
                 decode as its `Content-Encoding` says"
            } else {
                "The `Idempotency-Key` header is missing or malformed, or the body does not parse \
                 as JSON or decode as its `Content-Encoding` says"
            },
            if source.is_some() {
                &[
                    ProblemKind::EventIdMissing,
                    ProblemKind::EventIdInvalid,
                    ProblemKind::BodyInvalid,
                    ProblemKind::EncodingInvalid,
                ][..]
            } else {
                &[
                    ProblemKind::KeyMissing,
                    ProblemKind::KeyInvalid,
                    ProblemKind::BodyInvalid,
                    ProblemKind::EncodingInvalid,
                ][..]
            },
            None,
        ),
        (
            "409",
            "A request with this `Idempotency-Key` is still in progress: retry with the same key \
             after `Retry-After`",
            &[ProblemKind::InProgress][..],
            Some(("Retry-After", retry_after.clone())),
        ),
        (
            "413",
            "The request body is over the limit idem reads for its fingerprint; the key was not \
             used",
            &[ProblemKind::BodyTooLarge][..],
            None,
        ),
        (
            "422",
            "This `Idempotency-Key` was used for a different request (`mismatch` says whether \
             the method or path, or the body differs): use a new key",
            &[ProblemKind::KeyReused][..],
            None,
        ),
        (
            "500",
            "The operation's outcome could not be stored or replayed (the response is too large \
             to store, its body failed, the handler panicked, ended or broke its transaction, \
             the stored response does not decrypt, idem is not configured, or an operator \
             marked the operation failed); nothing was stored for the key",
            &[
                ProblemKind::ResponseTooLarge,
                ProblemKind::ResponseFailed,
                ProblemKind::HandlerPanicked,
                ProblemKind::TransactionEnded,
                ProblemKind::TransactionAborted,
                ProblemKind::StoredResponseUnreadable,
                ProblemKind::NotConfigured,
                ProblemKind::OperationFailed,
            ][..],
            None,
        ),
        (
            "503",
            "The key store failed or, on SQLite, stayed busy with other requests: nothing was \
             saved, retry with the same key after `Retry-After`",
            &[ProblemKind::StorageUnavailable, ProblemKind::StorageBusy][..],
            Some(("Retry-After", retry_after.clone())),
        ),
    ] {
        let types: Vec<String> = kinds.iter().map(|kind| kind.type_uri()).collect();
        let text = format!(
            "{text} (problem `type`: {}).",
            types
                .iter()
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let content = ContentBuilder::new()
            .schema(Some(Ref::from_schema_name(PROBLEM_SCHEMA)))
            .build();
        match operation.responses.responses.get_mut(status) {
            Some(RefOr::T(existing)) => {
                existing.description = format!("{}\n\nOr, from idem: {text}", existing.description);
                existing
                    .content
                    .entry(PROBLEM_JSON.to_owned())
                    .or_insert(RefOr::T(content));
                if let Some((name, header)) = extra_header {
                    existing.headers.insert(name.to_owned(), RefOr::T(header));
                }
            }
            // A shared response by reference is the application's to describe.
            Some(RefOr::Ref(_)) => {}
            None => {
                let mut response = ResponseBuilder::new()
                    .description(text)
                    .content(PROBLEM_JSON, content);
                if let Some((name, header)) = extra_header {
                    response = response.header(name, header);
                }
                operation
                    .responses
                    .responses
                    .insert(status.to_owned(), RefOr::T(response.build()));
            }
        }
    }
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

fn replayed_header() -> Header {
    HeaderBuilder::new()
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["true"])),
        ))
        .description(Some(
            "`true` when this response is the stored response to an earlier request with \
             the same `Idempotency-Key`, replayed; absent on the response of the request \
             that ran the operation",
        ))
        .build()
}

/// The RFC 9457 problem object idem answers with, as a schema: registered as
/// [`PROBLEM_SCHEMA`] by [`IdempotencyDocs`].
///
/// ```
/// let schema = idem_runtime::openapi::problem_schema();
/// let json = serde_json::to_value(&schema).unwrap();
/// assert_eq!(json["required"], serde_json::json!(["type", "title", "status", "detail"]));
/// ```
pub fn problem_schema() -> RefOr<utoipa::openapi::schema::Schema> {
    let text = || ObjectBuilder::new().schema_type(Type::String);
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(
            "An RFC 9457 problem details object from idem; `type` identifies the problem",
        ))
        .property(
            "type",
            text().description(Some("A URI identifying the problem")),
        )
        .property("title", text())
        .property("status", ObjectBuilder::new().schema_type(Type::Integer))
        .property("detail", text())
        .property(
            "mismatch",
            text()
                .enum_values(Some(["method_or_path", "body"]))
                .description(Some(
                    "On 422: what differs from the request the key was used for",
                )),
        )
        .required("type")
        .required("title")
        .required("status")
        .required("detail")
        .into()
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
    fn actix_patterns_become_templates() {
        assert_eq!(route_template("/orders"), "/orders");
        assert_eq!(
            route_template("/accounts/{account}/orders"),
            "/accounts/{account}/orders"
        );
        assert_eq!(
            route_template(r"/orders/{id:\d+}/items/{n}"),
            "/orders/{id}/items/{n}"
        );
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(readable_duration(86_400), "1 day");
        assert_eq!(readable_duration(36 * 3_600), "36 hours");
        assert_eq!(iso_duration(86_400), "P1D");
        assert_eq!(iso_duration(36 * 3_600), "PT36H");
        assert_eq!(iso_duration(90), "PT90S");
    }
}
