//! The responses idem adds to an operation: the `Idempotent-Replayed` header on the
//! handler's own, and the problem responses idem answers itself, with their schema.

use utoipa::openapi::header::{Header, HeaderBuilder};
use utoipa::openapi::path::Operation;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};

use crate::protocol::problem::{PROBLEM_JSON, ProblemKind};

/// The name of the problem schema in `components.schemas`.
///
/// ```
/// assert_eq!(idem_runtime::openapi::PROBLEM_SCHEMA, "IdempotencyProblem");
/// ```
pub const PROBLEM_SCHEMA: &str = "IdempotencyProblem";

/// Marks the handler's replayable responses with `Idempotent-Replayed`, and documents
/// idem's problem responses beside them; `by_event` for a webhook's operation, whose key
/// is the event's id.
pub(super) fn document_responses(operation: &mut Operation, by_event: bool) {
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
            if by_event {
                "The event's id is missing or malformed, or the body does not parse as JSON or \
                 decode as its `Content-Encoding` says"
            } else {
                "The `Idempotency-Key` header is missing or malformed, or the body does not parse \
                 as JSON or decode as its `Content-Encoding` says"
            },
            if by_event {
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
/// [`PROBLEM_SCHEMA`] by [`IdempotencyDocs`](super::IdempotencyDocs).
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
