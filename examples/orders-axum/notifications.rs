//! `POST /notifications` on axum: a message sent through the example's notification
//! provider, with its keys in Redis. The provider, the checks and the step are the actix
//! binary's `domain/notifications.rs`; this file holds the route, the extractor and the
//! responses. Keys in Redis name no database, so the handler is written once.

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};

use super::domain::notifications::{self, NewNotification, NotificationError, Notifications};
use super::domain::orders::Account;
use super::extract::json_body;
use super::{methods, problem_response};

/// The router of `POST /notifications`, with idem on Redis and the provider in the
/// requests' extensions, when the service has them (`REDIS_URL`); without them an empty
/// router, and the path is a 404.
pub(crate) fn router(notifications: Option<&Notifications>) -> Router {
    let Some(notifications) = notifications else {
        return Router::new();
    };
    Router::new()
        .route("/notifications", methods("POST", post(create_notification)))
        .layer(Extension(Arc::clone(&notifications.notifier)))
        .layer(Extension(notifications.idem.clone()))
}

/// Sends the notification (`domain::notifications::notify`): 201 with the message.
#[idem::axum::idempotent(scope = account, store = redis, lease = "3s", retention = "24h")]
async fn create_notification(
    account: Account,
    steps: idem::redis::Steps,
    Extension(notifier): Extension<Arc<notifications::Notifier>>,
    notification: NewNotification,
) -> Result<Response, NotificationError> {
    let sent = notifications::notify(account, &mut steps, &notifier, &notification).await?;
    Ok((StatusCode::CREATED, Json(sent)).into_response())
}

impl<S: Send + Sync> FromRequest<S> for NewNotification {
    type Rejection = NotificationError;

    async fn from_request(req: Request, state: &S) -> Result<Self, NotificationError> {
        json_body(req, state).await
    }
}

impl IntoResponse for NotificationError {
    fn into_response(self) -> Response {
        match self.problem() {
            Ok(problem) => problem_response(problem),
            // idem's own answer for a step it could not run or record.
            Err(_) => match self {
                Self::Step(error) => error.into_response(),
                _ => unreachable!("only a step error has idem's answer"),
            },
        }
    }
}
