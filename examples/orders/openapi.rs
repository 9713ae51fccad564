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
//! `POST /notifications` is left out: it is served only with `REDIS_URL`, and the document
//! describes the service as CI's schemathesis run serves it, without Redis.
//!
//! Kept free of the rest of the example so the tests include it as it is
//! (`#[path = "../examples/orders/openapi.rs"]`).

use idem::openapi::IdempotencyDocs;
use utoipa::{OpenApi, ToSchema};

#[derive(OpenApi)]
#[openapi(
    info(title = "orders", description = "The idem example service"),
    paths(create_order, list_orders, get_order, create_payment, get_payment, provider_event),
    modifiers(&IdempotencyDocs)
)]
pub(crate) struct ApiDoc;

/// The body of `POST /orders`. Unknown fields are ignored.
#[derive(ToSchema)]
#[allow(dead_code)] // a description only
struct NewOrder {
    item: String,
    /// At least 1 (a 32-bit integer).
    #[schema(minimum = 1, maximum = 2_147_483_647)]
    quantity: i32,
    /// At least 0; above 1000000 the card is declined (402).
    #[schema(minimum = 0, maximum = 9_223_372_036_854_775_807_i64)]
    amount_cents: i64,
}

/// The body of `POST /payments`: exactly these fields.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // a description only
struct NewPayment {
    /// 1 to 100000000.
    #[schema(minimum = 1, maximum = 100_000_000)]
    amount_cents: i64,
    /// Three capital letters, e.g. `EUR`.
    #[schema(pattern = "^[A-Z]{3}$", example = "EUR")]
    currency: String,
}

/// Creates an order (`app::create_order`).
#[utoipa::path(
    post,
    path = "/orders",
    request_body = NewOrder,
    params(Account),
    responses(
        (status = 201, description = "The order as JSON, with `Location: /orders/{id}`"),
        (status = 400, description = "`malformed-body`: the body is not JSON"),
        (status = 401, description = "`unauthenticated`: no usable `X-Account-Id`"),
        (status = 402, description = "`card-declined`: stored and replayed like a 201"),
        (status = 413, description = "`body-too-large`: the body is over the JSON limit"),
        (status = 415, description = "`unsupported-media-type`: the body is not sent as `application/json`"),
        (status = 422, description = "`invalid-order`: the body is not a valid order"),
        (status = 500, description = "`internal-error`: the database failed; nothing was saved"),
    )
)]
#[allow(dead_code)] // the handler is `app::create_order`
fn create_order() {}

/// The caller's orders, oldest first (`app::list_orders`).
#[utoipa::path(
    get,
    path = "/orders",
    params(Account),
    responses(
        (status = 200, description = "The caller's orders as a JSON array"),
        (status = 401, description = "`unauthenticated`: no usable `X-Account-Id`"),
        (status = 500, description = "`internal-error`: the database failed"),
    )
)]
#[allow(dead_code)] // the handler is `app::list_orders`
fn list_orders() {}

/// One of the caller's orders (`app::get_order`).
#[utoipa::path(
    get,
    path = "/orders/{id}",
    params(Account, ("id" = i64, Path, description = "The order's id")),
    responses(
        (status = 200, description = "The order as JSON"),
        (status = 401, description = "`unauthenticated`: no usable `X-Account-Id`"),
        (status = 404, description = "`order-not-found`: no such order in this account"),
        (status = 500, description = "`internal-error`: the database failed"),
    )
)]
#[allow(dead_code)] // the handler is `app::get_order`
fn get_order() {}

/// Creates and charges a payment in phases (`payments::create_payment`).
#[utoipa::path(
    post,
    path = "/payments",
    request_body = NewPayment,
    params(Account),
    responses(
        (status = 201, description = "The payment as JSON, with `Location: /payments/{id}`"),
        (status = 400, description = "`malformed-body`: the body is not JSON"),
        (status = 401, description = "`unauthenticated`: no usable `X-Account-Id`"),
        (status = 415, description = "`unsupported-media-type`: the body is not sent as `application/json`"),
        (status = 422, description = "`invalid-payment`: the body is not a valid payment"),
        (status = 500, description = "`internal-error`: the database failed; retry with the same key"),
        (status = 502, description = "`provider-failed`: retry with the same key to resume"),
    )
)]
#[allow(dead_code)] // the handler is `payments::create_payment`
fn create_payment() {}

/// One of the caller's payments with its state (`payments::get_payment`).
#[utoipa::path(
    get,
    path = "/payments/{id}",
    params(Account, ("id" = i64, Path, description = "The payment's id")),
    responses(
        (status = 200, description = "The payment as JSON"),
        (status = 401, description = "`unauthenticated`: no usable `X-Account-Id`"),
        (status = 404, description = "`payment-not-found`: no such payment in this account"),
        (status = 500, description = "`internal-error`: the database failed"),
    )
)]
#[allow(dead_code)] // the handler is `payments::get_payment`
fn get_payment() {}

/// The body of `POST /webhooks/provider`: an event of the payment provider.
#[derive(ToSchema)]
#[allow(dead_code)] // a description only
struct Event {
    /// The event's id: the same as its `webhook-id` header.
    id: String,
    /// `charge.succeeded` is recorded; any other type is acknowledged and ignored.
    #[schema(rename = "type", example = "charge.succeeded")]
    kind: String,
    data: ChargeData,
}

/// What a `charge.succeeded` event says about its charge.
#[derive(ToSchema)]
#[allow(dead_code)] // a description only
struct ChargeData {
    charge_id: String,
    #[schema(minimum = -9_223_372_036_854_775_808_i64, maximum = 9_223_372_036_854_775_807_i64)]
    amount_cents: i64,
    currency: String,
}

/// Receives the payment provider's signed events (`webhooks::provider_event`): Standard
/// Webhooks signatures, each event recorded once however often it is delivered.
#[utoipa::path(
    post,
    path = "/webhooks/provider",
    request_body = Event,
    params(
        ("webhook-timestamp" = String, Header, description = "When the provider sent this delivery, in seconds since the Unix epoch; at most 5 minutes from the receiver's clock"),
        ("webhook-signature" = String, Header, description = "Space-separated `v1,<base64>` signatures: HMAC-SHA256 of `{webhook-id}.{webhook-timestamp}.{body}` with the provider's secret"),
    ),
    responses(
        (status = 200, description = "The event is recorded (`{\"event_id\": .., \"recorded\": true}`), or ignored for a type other than `charge.succeeded` (`recorded: false`)"),
        (status = 400, description = "`malformed-body`: the body is not JSON"),
        (status = 401, description = "`webhook-signature-invalid` (an idem problem type): the signature headers are missing, the timestamp is too far from now, or no signature matches"),
        (status = 413, description = "`body-too-large`: the body is over the JSON limit"),
        (status = 415, description = "`unsupported-media-type`: the body is not sent as `application/json`"),
        (status = 422, description = "`invalid-event`: the body is not a valid event, or its `id` is not its `webhook-id`"),
        (status = 500, description = "`internal-error`: the database failed; nothing was saved, the provider delivers again"),
    )
)]
#[allow(dead_code)] // the handler is `webhooks::provider_event`
fn provider_event() {}

/// The header every operation needs: the caller, a positive 64-bit integer.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // a description only
struct Account {
    /// The caller's account id; without a usable one the answer is 401.
    #[param(
        rename = "X-Account-Id",
        minimum = 1,
        maximum = 9_223_372_036_854_775_807_i64
    )]
    x_account_id: i64,
}
