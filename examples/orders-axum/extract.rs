//! The axum binary's extractors: the caller, the order id, and the bodies of
//! `POST /orders`, `POST /payments` and `POST /webhooks/provider` with their test hooks.
//!
//! The bodies are decoded the way actix-web's `Json` extractor decodes them for the actix
//! binary (the same media type rule, limit and messages), so both answer a bad body with
//! the same problem, byte for byte.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use serde::de::DeserializeOwned;

use super::domain::body::{self, JsonBody};
use super::domain::orders::{ACCOUNT_HEADER, Account, NewOrder, TestHooks};
use super::domain::payments::{NewPayment, PaymentError};
use super::domain::problem::AppError;
use super::domain::webhooks::Event;

impl<S: Send + Sync> FromRequestParts<S> for Account {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, AppError> {
        let values = parts.headers.get_all(ACCOUNT_HEADER);
        Self::from_values(values.iter().map(HeaderValue::as_bytes))
    }
}

/// The `{id}` of `/orders/{id}`: an id that is not a 64-bit integer is a 404
/// `order-not-found`, as no such order exists.
#[derive(Debug)]
pub(crate) struct OrderId(pub(crate) i64);

impl<S: Send + Sync> FromRequestParts<S> for OrderId {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AppError> {
        let Ok(Path(id)) = Path::<String>::from_request_parts(parts, state).await else {
            return Err(AppError::NotFound);
        };
        id.parse().map(Self).map_err(|_| AppError::NotFound)
    }
}

/// The body of `POST /orders` and the request's test hooks, in that order.
#[derive(Debug)]
pub(crate) struct OrderRequest {
    pub(crate) order: NewOrder,
    pub(crate) hooks: TestHooks,
}

impl<S: Send + Sync> FromRequest<S> for OrderRequest {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, AppError> {
        let (order, hooks) = json_and_hooks(req, state, AppError::InvalidOrder).await?;
        Ok(Self { order, hooks })
    }
}

/// The body of `POST /webhooks/provider` and the request's test hooks.
#[derive(Debug)]
pub(crate) struct EventRequest {
    pub(crate) event: Event,
    pub(crate) hooks: TestHooks,
}

impl<S: Send + Sync> FromRequest<S> for EventRequest {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, AppError> {
        let (event, hooks) = json_and_hooks(req, state, AppError::InvalidEvent).await?;
        Ok(Self { event, hooks })
    }
}

impl<S: Send + Sync> FromRequest<S> for NewPayment {
    type Rejection = PaymentError;

    async fn from_request(req: Request, state: &S) -> Result<Self, PaymentError> {
        json_body(req, state).await
    }
}

/// A JSON body the domain parses itself, the whole of a `FromRequest` for it: another
/// media type is a 415 before the body is read, then the bytes (axum's body limit
/// applies), then the fields.
pub(crate) async fn json_body<T: JsonBody, S: Send + Sync>(
    req: Request,
    state: &S,
) -> Result<T, T::Error> {
    let content_type = req.headers().get(header::CONTENT_TYPE);
    if !body::is_json(content_type.map(HeaderValue::as_bytes)) {
        return Err(T::unsupported_media_type());
    }
    let bytes = Bytes::from_request(req, state)
        .await
        .map_err(|error| T::malformed(error.body_text()))?;
    T::parse(&bytes)
}

/// A JSON body, then the test hooks of the query: the order actix-web's extractors run in.
async fn json_and_hooks<T: DeserializeOwned, S: Send + Sync>(
    req: Request,
    state: &S,
    invalid: fn(String) -> AppError,
) -> Result<(T, TestHooks), AppError> {
    let query = req.uri().query().unwrap_or_default().to_owned();
    let content_type = req.headers().get(header::CONTENT_TYPE).cloned();
    let content_type = content_type.as_ref().map(HeaderValue::as_bytes);
    if !is_json_media_type(content_type) {
        return Err(AppError::UnsupportedMediaType);
    }
    let body = Bytes::from_request(req, state).await.map_err(|error| {
        // Past axum's own body limit (the same 2 MiB): the answer actix-web gives past its
        // JSON limit.
        if error.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large()
        } else {
            AppError::MalformedBody(error.body_text())
        }
    })?;
    let value = decode_json(&body, invalid)?;
    Ok((value, TestHooks::from_query(&query)?))
}

/// The largest JSON body the order and event extractors read: actix-web's `JsonConfig`
/// default, which the axum binary applies too so both answer the same bodies alike.
const JSON_LIMIT: usize = 2_097_152;

/// Whether a `Content-Type` value is JSON the way actix-web's `Json` extractor decides:
/// a media type whose subtype is `json` or ends in `+json`, any case, parameters aside.
fn is_json_media_type(content_type: Option<&[u8]>) -> bool {
    let Some(text) = content_type.and_then(|value| std::str::from_utf8(value).ok()) else {
        return false;
    };
    let essence = text.split(';').next().unwrap_or_default().trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    let token = |part: &str| !part.is_empty() && !part.contains(char::is_whitespace);
    let subtype = subtype.to_ascii_lowercase();
    token(kind) && token(&subtype) && (subtype == "json" || subtype.ends_with("+json"))
}

/// Decodes a JSON body with the answers actix-web's `Json` extractor gives, `invalid`
/// for a well-formed body that is not a valid value.
fn decode_json<T: DeserializeOwned>(
    body: &[u8],
    invalid: fn(String) -> AppError,
) -> Result<T, AppError> {
    if body.len() > JSON_LIMIT {
        return Err(too_large());
    }
    serde_json::from_slice(body).map_err(|error| {
        if error.is_data() {
            invalid(error.to_string())
        } else {
            AppError::MalformedBody(format!("Json deserialize error: {error}"))
        }
    })
}

fn too_large() -> AppError {
    AppError::BodyTooLarge(format!(
        "JSON payload has exceeded limit ({JSON_LIMIT} bytes)."
    ))
}
