//! What the service tells operators and client authors: idem's metrics in Prometheus
//! text at `GET /metrics`, and the OpenAPI document of the idempotent endpoints at
//! `GET /openapi.json`.
//!
//! The document describes the two idempotent operations here, beside the service rather
//! than on its handlers; `idem::openapi::IdempotencyDocs` adds what idem contributes to
//! each (the `Idempotency-Key` header, the retention policy, `Idempotent-Replayed` and
//! the 400/409/422 problems). In a service of your own, put `#[utoipa::path]` on the
//! handlers themselves.

use actix_web::{HttpResponse, get, web};
use idem::openapi::IdempotencyDocs;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use utoipa::{OpenApi, ToSchema};

/// Bucket bounds in seconds for the time spent in idem's statements: a claim on a local
/// database takes about a millisecond, one waiting for a duplicate up to `claim_wait`.
const STATEMENT_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Installs the Prometheus recorder as the process's `metrics` recorder.
pub(crate) fn install_metrics() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(idem::metrics::STATEMENT_SECONDS.to_owned()),
            &STATEMENT_BUCKETS,
        )
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|error| error.to_string())?;
    idem::metrics::describe();
    Ok(handle)
}

/// Registers `GET /metrics` and `GET /openapi.json`.
pub(crate) fn configure(cfg: &mut web::ServiceConfig, metrics: &PrometheusHandle) {
    cfg.app_data(web::Data::new(metrics.clone()))
        .service(prometheus_text)
        .service(openapi_json);
}

#[get("/metrics")]
async fn prometheus_text(metrics: web::Data<PrometheusHandle>) -> HttpResponse {
    // Without the exporter's HTTP listener nothing else runs its upkeep.
    metrics.run_upkeep();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(metrics.render())
}

#[get("/openapi.json")]
async fn openapi_json() -> HttpResponse {
    match ApiDoc::openapi().to_json() {
        Ok(json) => HttpResponse::Ok()
            .content_type("application/json")
            .body(json),
        Err(error) => HttpResponse::InternalServerError().body(error.to_string()),
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "orders", description = "The idem example service's idempotent endpoints"),
    paths(create_order, create_payment),
    modifiers(&IdempotencyDocs)
)]
struct ApiDoc;

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
