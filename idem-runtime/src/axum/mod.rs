//! The axum 0.8 adapter (feature `axum`): the only place axum's types appear (besides the
//! code `#[idem::axum::idempotent]` generates). axum is on `http` 1.x, the core's own
//! version, so request headers, header names and status codes need no conversion.
//!
//! It does the adapter's four jobs for the protocol core:
//!
//! - finds the [`Idem`](crate::Idem) in the request's extensions, where
//!   `Router::layer(Extension(idem))` puts it ([`prepare`]). Extensions rather than the
//!   router's state: a handler then works with whatever state type the application's
//!   router has, without a `FromRef` impl, and a missing `Idem` is the same 500
//!   `not-configured` problem the actix-web adapter answers;
//! - reads the body up to `max_request_bytes` (413 past it) and decodes its
//!   `Content-Encoding` for the fingerprint ([`prepare`]);
//! - runs the handler's extractors on the buffered, decoded body: all but the last through
//!   `FromRequestParts`, the last through `FromRequest`, as axum runs them
//!   ([`Prepared::extraction`], [`extract_parts`], [`extract_last`]), and converts the
//!   handler's `IntoResponse`;
//! - implements the core's `Framework` for axum's `Response` ([`framework`]).
//!
//! And the same protocol as a tower layer ([`IdempotencyLayer`], `layer.rs`), whose
//! routes take the transaction as the `Tx` extractor.
//!
//! Besides, `IntoResponse` for `PhaseError` and `WebhookRejected`, so a handler's error
//! type can carry them with `?`; `ScopeKey` for `Extension<T>` (an identity middleware
//! put in the request) and `UnverifiedScope<Path<T>>`, and `FromRequestParts` for
//! `UnverifiedScope` and `SignedWebhook` (over the body idem buffered).

pub(crate) mod framework;
mod layer;
mod prepare;
mod scope;
mod webhook;

pub use layer::{IdempotencyLayer, IdempotentService};
#[cfg(feature = "redis")]
pub use prepare::prepare_redis;
pub use prepare::{
    BodyExtractor, Extracting, Extraction, PartsExtractor, Prepared, extract_last,
    extract_last_boxed, extract_parts, extract_parts_boxed, prepare,
};
