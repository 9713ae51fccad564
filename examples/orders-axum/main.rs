//! The orders service of `examples/orders` on axum 0.8: the same endpoints, the same
//! answers byte for byte, the same environment and startup lines, SQLite by default and
//! PostgreSQL with `DATABASE_URL`.
//!
//! ```text
//! cargo run --example orders-axum                                          # SQLite
//! DATABASE_URL=postgres://localhost/orders cargo run --example orders-axum # PostgreSQL
//! ```
//!
//! `examples/orders/main.rs` describes the HTTP contract, the environment and the test
//! hooks; both binaries run the same `examples/orders/domain/` files (the domain, the SQL,
//! the provider, the problems and the startup), and this one adds only axum's routes,
//! extractors and responses.

#[path = "../orders/domain/mod.rs"]
mod domain;

mod app;
mod observability;
#[path = "../orders/openapi.rs"]
mod openapi;
mod payments;
mod webhooks;

use std::process::ExitCode;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};

use domain::payment_store::PaymentStore;
use domain::startup::{Server, Service};
use domain::webhooks::WebhookStore;

#[tokio::main]
async fn main() -> ExitCode {
    domain::startup::main::<Axum>().await
}

/// axum's server (hyper through `axum::serve`), with every route of the service.
struct Axum;

impl<DB> Server<DB> for Axum
where
    DB: PaymentStore + WebhookStore,
    DB: app::OrderRoutes + payments::PaymentRoutes + webhooks::WebhookRoutes,
{
    async fn serve(service: Service<DB>) -> std::io::Result<()> {
        let Service {
            idem,
            notifications,
            listener,
            settings,
            verifier,
            metrics,
        } = service;
        let app: Router = app::router(&idem)
            .merge(app::notifications::router(notifications.as_ref()))
            .merge(payments::router(idem.pool(), settings))
            .merge(webhooks::router::<DB>(verifier))
            .merge(observability::router(&metrics))
            // Every idempotent handler finds idem here.
            .layer(Extension(idem))
            .layer(axum::middleware::from_fn(head_limits));
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        axum::serve(listener, app)
            .with_graceful_shutdown(stop_signal())
            .await
    }
}

/// actix-web's limits on a request's head (actix-http's `MAX_BUFFER_SIZE` and
/// `MAX_HEADERS`), which hyper's defaults (about 400 KiB, 100 headers) are above: past
/// them the answer is its bare 431, before idem or a handler sees the request.
const MAX_HEAD_BYTES: usize = 131_072;
const MAX_HEADERS: usize = 96;

/// Answers 431 to a head past [`MAX_HEAD_BYTES`] or [`MAX_HEADERS`], as the actix binary's
/// HTTP layer does, so both refuse the same requests.
async fn head_limits(request: Request, next: Next) -> Response {
    // The head as sent: the request line, each header line, the blank line.
    let request_line = request.method().as_str().len() + request.uri().to_string().len() + 12;
    let lines: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if request.headers().len() > MAX_HEADERS || request_line + lines + 2 >= MAX_HEAD_BYTES {
        return StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE.into_response();
    }
    next.run(request).await
}

/// SIGINT or SIGTERM: what stops actix-web's server, so that both binaries stop alike (no
/// new connections, requests in flight answered, then the relay and the expiry task
/// stopped).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate()).expect("a SIGTERM handler installs");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
