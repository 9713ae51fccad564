//! `POST /notifications` on actix-web: a message sent through the example's notification
//! provider, with its keys in Redis. The provider, the checks and the step are in
//! `domain/notifications.rs`, shared with the axum binary; this file holds the route, the
//! extractor and the responses.

use actix_web::http::{Method, StatusCode};
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError, dev, web};

use super::domain::notifications::{self, NewNotification, NotificationError, Notifications};
use super::{Account, JsonBodyFuture, json_body, problem_response, resource};

/// Registers `POST /notifications` with idem on Redis and the provider, when the service
/// has them (`REDIS_URL`); without them nothing is registered and the path is a 404.
pub(crate) fn configure(cfg: &mut web::ServiceConfig, notifications: Option<&Notifications>) {
    let Some(notifications) = notifications else {
        return;
    };
    cfg.app_data(notifications.idem.clone())
        .app_data(web::Data::from(notifications.notifier.clone()))
        .service(resource(
            "/notifications",
            [(Method::POST, web::to(create_notification))],
        ));
}

/// Sends the notification (`domain::notifications::notify`): 201 with the message.
#[idem::idempotent(scope = account, store = redis, lease = "3s", retention = "24h")]
async fn create_notification(
    account: Account,
    steps: idem::redis::Steps,
    notification: NewNotification,
    notifier: web::Data<notifications::Notifier>,
) -> Result<HttpResponse, NotificationError> {
    let sent = notifications::notify(account, &mut steps, &notifier, &notification).await?;
    Ok(HttpResponse::Created().json(&sent))
}

impl FromRequest for NewNotification {
    type Error = NotificationError;
    type Future = JsonBodyFuture<Self>;

    fn from_request(req: &HttpRequest, payload: &mut dev::Payload) -> Self::Future {
        json_body(req, payload)
    }
}

impl ResponseError for NotificationError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Step(error) => error.status_code(),
            other => StatusCode::from_u16(other.status()).expect("a problem's status is valid"),
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self.problem() {
            Ok(problem) => problem_response(problem),
            Err(step) => step.error_response(),
        }
    }
}
