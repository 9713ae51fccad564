//! What the service tells operators and client authors: idem's metrics in Prometheus
//! text at `GET /metrics`, and the OpenAPI document (`openapi.rs`) at `GET /openapi.json`.

use actix_web::http::Method;
use actix_web::{HttpResponse, web};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use utoipa::OpenApi;

use crate::app::resource;
use crate::openapi::ApiDoc;

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
        .service(resource(
            "/metrics",
            [(Method::GET, web::to(prometheus_text))],
        ))
        .service(resource(
            "/openapi.json",
            [(Method::GET, web::to(openapi_json))],
        ));
}

async fn prometheus_text(metrics: web::Data<PrometheusHandle>) -> HttpResponse {
    // Without the exporter's HTTP listener nothing else runs its upkeep.
    metrics.run_upkeep();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(metrics.render())
}

async fn openapi_json() -> HttpResponse {
    match ApiDoc::openapi().to_json() {
        Ok(json) => HttpResponse::Ok()
            .content_type("application/json")
            .body(json),
        Err(error) => HttpResponse::InternalServerError().body(error.to_string()),
    }
}
