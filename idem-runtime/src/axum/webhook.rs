//! `SignedWebhook` as an axum extractor.

use ::axum::extract::FromRequestParts;
use http::request::Parts;

use crate::protocol::webhook::verify::{Delivery, RawBody};
use crate::protocol::webhook::{SignedWebhook, WebhookRejected, WebhookVerifier};

/// Verifies the delivery with the [`WebhookVerifier`] that
/// `Router::layer(axum::Extension(verifier))` put in the request's extensions.
///
/// A `FromRequestParts` extractor, so it may come before the body's extractor (`Json`),
/// as in the actix-web form: it reads the body idem buffered, which only an
/// `#[idem::axum::idempotent]` handler or a route behind
/// `idem::axum::IdempotencyLayer` has. Anywhere else it answers 500
/// `not-configured`, as a missing verifier does.
impl<S: Send + Sync> FromRequestParts<S> for SignedWebhook {
    type Rejection = WebhookRejected;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let Some(verifier) = parts.extensions.get::<WebhookVerifier>() else {
            return Err(WebhookRejected::not_configured(
                "Router::layer(axum::Extension(verifier))",
            ));
        };
        let delivery = Delivery::read(&parts.headers)?;
        let Some(RawBody(body)) = parts.extensions.get::<RawBody>() else {
            tracing::error!(
                "idem::SignedWebhook reads the body idem buffers: take it in an \
                 #[idem::axum::idempotent] handler or behind idem::axum::IdempotencyLayer"
            );
            return Err(WebhookRejected::server_bug(
                "the server verifies webhook signatures where it cannot read the body; \
                 this is a server bug",
            ));
        };
        delivery.verify(verifier, body.clone())
    }
}
