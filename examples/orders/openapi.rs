//! The OpenAPI document the service serves at `GET /openapi.json`: what a client may send
//! and every answer it may get, so that a schema-driven tester (schemathesis in CI) finds
//! no request the document allows and the server refuses, and no answer it leaves out.
//!
//! The document describes the operations here, beside the service rather than on its
//! handlers (which are generic over the database, and utoipa's attribute would need one
//! of each); `idem::openapi::IdempotencyDocs` adds what idem contributes to the
//! idempotent ones (the `Idempotency-Key` header, the retention policy,
//! `Idempotent-Replayed` and the problems idem answers itself). In a service of your own,
//! put `#[utoipa::path]` on the handlers themselves.
//!
//! Kept free of the rest of the example so the tests include it as it is
//! (`#[path = "../examples/orders/openapi.rs"]`).

use idem::openapi::IdempotencyDocs;
use utoipa::{OpenApi, ToSchema};

#[derive(OpenApi)]
#[openapi(
    info(title = "orders", description = "The idem example service's idempotent endpoints"),
    paths(create_order, create_payment),
    modifiers(&IdempotencyDocs)
)]
pub(crate) struct ApiDoc;

/// The body of `POST /orders`.
#[derive(ToSchema)]
#[allow(dead_code)] // a description only
struct NewOrder {
    item: String,
    /// At least 1.
    quantity: i32,
    /// At least 0; above 1000000 the card is declined.
    amount_cents: i64,
}

/// The body of `POST /payments`.
#[derive(ToSchema)]
#[allow(dead_code)] // a description only
struct NewPayment {
    /// 1 to 100000000.
    amount_cents: i64,
    /// Three capital letters, e.g. `EUR`.
    currency: String,
}

/// Creates an order (`app::create_order`).
#[utoipa::path(
    post,
    path = "/orders",
    request_body = NewOrder,
    params(("X-Account-Id" = i64, Header, description = "The caller's account id")),
    responses(
        (status = 201, description = "The order as JSON, with `Location: /orders/{id}`"),
        (status = 401, description = "`unauthenticated`: no usable `X-Account-Id`"),
        (status = 402, description = "`card-declined`: stored and replayed like a 201"),
        (status = 422, description = "`invalid-order`: the body is not a valid order"),
    )
)]
#[allow(dead_code)] // the handler is `app::create_order`
fn create_order() {}

/// Creates and charges a payment in phases (`payments::create_payment`).
#[utoipa::path(
    post,
    path = "/payments",
    request_body = NewPayment,
    params(("X-Account-Id" = i64, Header, description = "The caller's account id")),
    responses(
        (status = 201, description = "The payment as JSON, with `Location: /payments/{id}`"),
        (status = 401, description = "`unauthenticated`: no usable `X-Account-Id`"),
        (status = 422, description = "`invalid-payment`: the body is not a valid payment"),
        (status = 502, description = "`provider-failed`: retry with the same key to resume"),
    )
)]
#[allow(dead_code)] // the handler is `payments::create_payment`
fn create_payment() {}
