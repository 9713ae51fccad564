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
//! see the route (written above the route attribute, see
//! [`Policy::route`](crate::Policy::route)), else by its `operationId`, which
//! `#[utoipa::path]` sets to the handler's name. Under a
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
#![cfg_attr(feature = "axum", doc = include_str!("axum.md"))]

use utoipa::Modify;
use utoipa::openapi::OpenApi;
use utoipa::openapi::path::{Operation, PathItem};

mod operation;
mod responses;

pub use operation::document_operation;
pub use responses::{PROBLEM_SCHEMA, problem_schema};

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
}
