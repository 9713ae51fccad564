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
            // The payload as received, not `web::Bytes`, which decodes `Content-Encoding`:
            // the sender signed the bytes it sent, and inside `#[idempotent]` the raw
            // body is what is verified, so both paths check the same bytes.
            None => match web::Payload::from_request(req, payload).into_inner() {
                Ok(stream) => BodySource::Stream(stream),
                Err(error) => BodySource::Failed(error),
            },
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
                BodySource::Failed(error) => return Err(WebhookRejected::unreadable_body(error)),
                BodySource::Stream(stream) => match stream.to_bytes_limited(RAW_LIMIT).await {
                    Ok(read) => read.map_err(WebhookRejected::unreadable_body)?,
                    Err(too_large) => return Err(WebhookRejected::unreadable_body(too_large)),
                },
            };
            delivery.verify(&verifier, body)
        })
    }
}

enum BodySource {
    Buffered(Bytes),
    Stream(web::Payload),
    Failed(actix_web::Error),
}

/// The most bytes read outside `#[idempotent]`: actix-web's own default for `web::Bytes`
/// (`PayloadConfig`'s limit, which it does not let an extractor read).
const RAW_LIMIT: usize = 262_144;

/// Makes the raw body readable by [`SignedWebhook`] without taking it from the payload.
pub(crate) fn keep_raw_body(req: &HttpRequest, body: &Bytes) {
    req.extensions_mut().insert(RawBody(body.clone()));
}
