//! What the service tells operators and client authors, on axum: idem's metrics in
//! Prometheus text at `GET /metrics`, and the OpenAPI document at `GET /openapi.json`
//! (the actix binary's `openapi.rs`, which names no framework). The recorder is
//! installed at startup (`domain/startup.rs`).

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use utoipa::OpenApi;

use crate::app::methods;
use crate::openapi::ApiDoc;

/// `GET /metrics` and `GET /openapi.json`.
pub(crate) fn router(metrics: &PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", methods("GET", get(prometheus_text)))
        .route("/openapi.json", methods("GET", get(openapi_json)))
        .layer(Extension(metrics.clone()))
}

async fn prometheus_text(Extension(metrics): Extension<PrometheusHandle>) -> Response {
    // Without the exporter's HTTP listener nothing else runs its upkeep.
    metrics.run_upkeep();
    let content_type = [(header::CONTENT_TYPE, "text/plain; version=0.0.4")];
    (content_type, metrics.render()).into_response()
}

async fn openapi_json() -> Response {
    match ApiDoc::openapi().to_json() {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}
