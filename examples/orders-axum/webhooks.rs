//! `POST /webhooks/provider` on axum: the payment provider's signed events, each recorded
//! once. What an event is and how it is recorded is the actix binary's
//! `domain/webhooks.rs`; this file holds the route, its verifier and the responses.

use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, post};
use axum::{Extension, Json, Router};
use sqlx::{Postgres, Sqlite};

use crate::app::extract::EventRequest;
use crate::app::methods;
use crate::domain::problem::AppError;
use crate::domain::webhooks::{PATH, WebhookStore, receive_event};

/// The receiver, with the verifier `idem::SignedWebhook` finds in the requests'
/// extensions.
pub(crate) fn router<DB: WebhookRoutes>(verifier: idem::WebhookVerifier) -> Router {
    Router::new()
        .route(PATH, methods("POST", DB::provider_event()))
        .layer(Extension(verifier))
}

/// `router` for a database: the handler stamped out for it.
pub(crate) trait WebhookRoutes: WebhookStore {
    /// `POST /webhooks/provider`.
    fn provider_event() -> MethodRouter;
}

/// `POST /webhooks/provider`. Retention 5 days: longer than the provider retries (3 days).
macro_rules! webhook_handlers {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::*;

            #[idem::axum::idempotent(scope = sender, key = header("webhook-id"), retention = "5d")]
            pub(crate) async fn provider_event(
                sender: idem::SignedWebhook,
                tx: idem::Tx<'_, $db>,
                request: EventRequest,
            ) -> Result<Response, AppError> {
                let EventRequest { event, hooks } = request;
                let received = receive_event::<$db>(&mut tx, sender.id(), event, &hooks).await?;
                Ok(Json(received).into_response())
            }
        }

        impl WebhookRoutes for $db {
            fn provider_event() -> MethodRouter {
                post($module::provider_event)
            }
        }
    };
}

webhook_handlers!(on_postgres, Postgres);
webhook_handlers!(on_sqlite, Sqlite);
