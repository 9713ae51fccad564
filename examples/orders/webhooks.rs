//! `POST /webhooks/provider` on actix-web: the payment provider's signed events, each
//! recorded once. What an event is and how it is recorded is in `domain/webhooks.rs`,
//! shared with the axum binary; this file holds the route and its extractors.
//!
//! Kept free of the binary's parts (like `app.rs`), so the in-process tests include it.

use actix_web::error::JsonPayloadError;
use actix_web::http::Method;
use actix_web::{HttpRequest, HttpResponse, web};

use crate::app::domain::webhooks::{Event, receive_event};
use crate::app::{AppError, TestHooks, json_error, resource};

pub(crate) use crate::app::domain::webhooks::{PATH, WebhookStore};
// The tests sign their deliveries with these.
#[allow(unused_imports)]
pub(crate) use crate::app::domain::webhooks::{DEFAULT_SECRET, SENDER};

/// Registers the receiver and its verifier.
pub(crate) fn configure<DB: WebhookStore>(
    cfg: &mut web::ServiceConfig,
    verifier: idem::WebhookVerifier,
) {
    cfg.service(
        resource(PATH, [(Method::POST, web::to(provider_event::<DB>))])
            .app_data(verifier)
            .app_data(web::JsonConfig::default().error_handler(event_json_error)),
    );
}

/// As for orders, but well-formed JSON that is not an event is `invalid-event`.
fn event_json_error(error: JsonPayloadError, req: &HttpRequest) -> actix_web::Error {
    match error {
        JsonPayloadError::Deserialize(error) if error.is_data() => {
            AppError::InvalidEvent(error.to_string()).into()
        }
        error => json_error(error, req),
    }
}

/// `POST /webhooks/provider`. Retention 5 days: longer than the provider retries (3 days).
#[idem::idempotent(scope = sender, key = header("webhook-id"), retention = "5d")]
async fn provider_event<DB: WebhookStore>(
    sender: idem::SignedWebhook,
    tx: idem::Tx<'_, DB>,
    event: web::Json<Event>,
    hooks: TestHooks,
) -> Result<HttpResponse, AppError> {
    let received = receive_event::<DB>(&mut tx, sender.id(), event.into_inner(), &hooks).await?;
    Ok(HttpResponse::Ok().json(received))
}
