//! The actix-web adapter: the only place actix-web's types appear (besides the code
//! `#[idempotent]` generates). It does four jobs for the protocol core:
//!
//! - finds the [`Idem`](crate::Idem) in the app data, plain or in `web::Data`
//!   ([`prepare`]);
//! - reads the payload up to `max_request_bytes` (413 past it) and decodes its
//!   `Content-Encoding` for the fingerprint ([`prepare`]);
//! - runs the handler's extractors on the buffered body and converts its `Responder`
//!   ([`extracted`], [`respond`]);
//! - implements the core's `Framework` for `HttpResponse` ([`framework`]): buffering a
//!   response, reading its status and allow-listed headers, putting it back together, and
//!   building replays and problem responses.
//!
//! Besides, it implements actix-web's traits for the core's types: `FromRequest` for
//! `SignedWebhook` and `UnverifiedScope`, `ResponseError` for `PhaseError` and
//! `WebhookRejected`, `ScopeKey` for `web::ReqData`, `UnverifiedScope<web::Path>` and
//! `UnverifiedScope<web::Query>`, and the builders' conversions of actix-web's (`http`
//! 0.2) header names and status codes.

pub(crate) mod framework;
mod prepare;
mod scope;
mod webhook;

#[cfg(feature = "redis")]
pub use prepare::prepare_redis;
pub use prepare::{Prepared, extracted, prepare, respond};
