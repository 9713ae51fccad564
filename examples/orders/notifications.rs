//! `POST /notifications` on actix-web: a message sent through the example's notification
//! provider, with its keys in Redis. The provider, the checks and the step are in
//! `domain/notifications.rs`, shared with the axum binary; this file holds the route, the
//! extractor and the responses.

use std::future::Future;
use std::pin::Pin;

use actix_web::http::header;
use actix_web::http::{Method, StatusCode};
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError, dev, web};

use super::domain::notifications::{self, NewNotification, NotificationError, Notifications};
use super::domain::payments::NewPayment;
use super::{Account, problem_response, resource};

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
    type Future = Pin<Box<dyn Future<Output = Result<Self, NotificationError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut dev::Payload) -> Self::Future {
        let content_type = req.headers().get(header::CONTENT_TYPE);
        let is_json = NewPayment::is_json(content_type.map(|value| value.as_bytes()));
        let body = web::Bytes::from_request(req, payload);
        Box::pin(async move {
            if !is_json {
                return Err(NotificationError::UnsupportedMediaType);
            }
            let body = body
                .await
                .map_err(|error| NotificationError::MalformedBody(error.to_string()))?;
            Self::parse(&body)
        })
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
