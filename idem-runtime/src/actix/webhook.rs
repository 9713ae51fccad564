//! `SignedWebhook` as an actix-web extractor.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::web::{self, Bytes};
use actix_web::{FromRequest, HttpMessage, HttpRequest};

use crate::protocol::webhook::verify::{Delivery, RawBody};
use crate::protocol::webhook::{SignedWebhook, WebhookRejected, WebhookVerifier};

impl FromRequest for SignedWebhook {
    type Error = WebhookRejected;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let verifier = req
            .app_data::<WebhookVerifier>()
            .or_else(|| req.app_data::<web::Data<WebhookVerifier>>().map(|d| &***d))
            .cloned();
        let buffered = req.extensions().get::<RawBody>().map(|raw| raw.0.clone());
        let body = match buffered {
            Some(body) => BodySource::Buffered(body),
            None => BodySource::Stream(web::Bytes::from_request(req, payload)),
        };
        // The headers are read now, so the future holds no copy of the map.
        let checked = match verifier {
            Some(verifier) => Delivery::read(req.headers()).map(|delivery| (verifier, delivery)),
            None => Err(WebhookRejected::not_configured("App::app_data")),
        };
        Box::pin(async move {
            let (verifier, delivery) = checked?;
            let body = match body {
                BodySource::Buffered(body) => body,
                BodySource::Stream(future) => {
                    future.await.map_err(WebhookRejected::unreadable_body)?
                }
            };
            delivery.verify(&verifier, body)
        })
    }
}

enum BodySource {
    Buffered(Bytes),
    Stream(<Bytes as FromRequest>::Future),
}

/// Makes the raw body readable by [`SignedWebhook`] without taking it from the payload.
pub(crate) fn keep_raw_body(req: &HttpRequest, body: &Bytes) {
    req.extensions_mut().insert(RawBody(body.clone()));
}
