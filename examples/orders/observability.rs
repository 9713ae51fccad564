//! What the service tells operators and client authors: idem's metrics in Prometheus
//! text at `GET /metrics`, and the OpenAPI document (`openapi.rs`) at `GET /openapi.json`.
//! The recorder is installed at startup (`domain/startup.rs`).

use actix_web::http::Method;
use actix_web::{HttpResponse, web};
use metrics_exporter_prometheus::PrometheusHandle;
use utoipa::OpenApi;

use crate::app::resource;
use crate::openapi::ApiDoc;

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
