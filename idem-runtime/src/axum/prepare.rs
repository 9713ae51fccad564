//! Reading an axum request for the core, and the handler's extractors and answer.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

use ::axum::extract::{FromRequest, FromRequestParts, Request};
use ::axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::HeaderMap;
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH, HeaderValue};
use http::request::Parts;

use super::framework::{Axum, problem_response, read_limited};
use crate::protocol::config::{Configured, Idem};
use crate::protocol::exchange::Exchange;
use crate::protocol::fingerprint::decode::{self, BodyLimit};
use crate::protocol::framework::Unbuffered;
use crate::protocol::phased::Phases;
use crate::protocol::policy::Policy;
use crate::protocol::problem::ProblemKind;
#[cfg(feature = "redis")]
use crate::protocol::redis::{RedisIdem, Steps};
use crate::protocol::tx::{LentTx, Tx};
use crate::protocol::webhook::verify::RawBody;
use crate::store::Backend;

/// A request whose body is read and decoded, before any extractor ran.
#[doc(hidden)]
#[derive(Debug)]
pub struct Prepared<C> {
    /// The key store's configuration: an [`Idem`], or Redis's.
    idem: C,
    policy: &'static Policy,
    /// The request's head as sent: the fingerprint reads its headers.
    head: Parts,
    /// The body as sent, for a signature over the exact bytes (`SignedWebhook`).
    body: Bytes,
    /// The body decoded from its `Content-Encoding`: what is fingerprinted and what the
    /// extractors read.
    content: Bytes,
}

/// The request as the handler's extractors see it: the head (which `FromRequestParts`
/// extractors may change, as in axum) and the decoded body for the last extractor.
#[doc(hidden)]
#[derive(Debug)]
pub struct Extraction {
    parts: Parts,
    body: Bytes,
}

/// Finds the `Idem` that `Router::layer(Extension(idem))` put in the request's
/// extensions, buffers the body (413 past the limit) and decodes its `Content-Encoding`
/// (413 when the decoded content is past the limit, 400 when it does not decode), before
/// any extractor could read it unbounded. The key is checked after the extractors, so that
/// e.g. an unauthenticated request gets the application's 401 rather than a 400 about its
/// key.
#[doc(hidden)]
pub async fn prepare<DB: Backend>(
    policy: &'static Policy,
    req: Request,
) -> Result<Prepared<Idem<DB>>, Response> {
    prepare_with(policy, req).await
}

/// [`prepare`] for a handler whose keys live in Redis (`store = redis`).
#[cfg(feature = "redis")]
#[doc(hidden)]
pub async fn prepare_redis(
    policy: &'static Policy,
    req: Request,
) -> Result<Prepared<RedisIdem>, Response> {
    prepare_with(policy, req).await
}

async fn prepare_with<C: Configured>(
    policy: &'static Policy,
    req: Request,
) -> Result<Prepared<C>, Response> {
    let (head, body) = req.into_parts();
    let Some(idem) = head.extensions.get::<C>().cloned() else {
        tracing::error!(
            handler = policy.handler(),
            "idem is not configured: add it to the router with \
             Router::layer(axum::Extension({}))",
            C::REGISTER
        );
        return Err(problem_response(ProblemKind::NotConfigured.problem(
            "the server has no idempotency store configured; this is a server bug",
        )));
    };
    let limit = BodyLimit(idem.settings().max_request_bytes());
    limit
        .check_declared(&head.headers)
        .map_err(problem_response)?;
    let body = match read_limited(body, limit.0).await {
        Ok(body) => body,
        Err(Unbuffered::TooLarge) => return Err(problem_response(limit.too_large())),
        Err(Unbuffered::Failed(error)) => {
            tracing::debug!(%error, "the request body could not be read");
            return Err(problem_response(
                ProblemKind::BodyInvalid
                    .problem(format!("the request body could not be read: {error}")),
            ));
        }
    };
    let content = limit
        .content(&head.headers, &body)
        .await
        .map_err(problem_response)?;
    Ok(Prepared {
        idem,
        policy,
        head,
        body,
        content,
    })
}

/// `FromRequestParts<S>` under a name of its own, so that a parameter of a handler
/// written with `state = ..` that is no extractor for that state gets this message, at
/// its type, rather than axum's "`Handler` is not implemented" where it is routed. The
/// compiler reports the trait the bound names when the unmet one is about the same type,
/// so the message stays this one.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an extractor of the request's head for the router state `{S}`",
    label = "not `axum::extract::FromRequestParts<{S}>`",
    note = "every parameter of an axum handler but the last (and `Tx` or `Phases`) is run \
            through `FromRequestParts`: implement `axum::extract::FromRequestParts<{S}>` for \
            `{Self}`, or, if it reads the body, make it the last parameter"
)]
pub trait PartsExtractor<S>: FromRequestParts<S> {}

impl<T: FromRequestParts<S>, S> PartsExtractor<S> for T {}

/// `FromRequest<S, M>` under a name of its own, for the handler's last extractor: see
/// [`PartsExtractor`].
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an extractor for the router state `{S}`",
    label = "not `axum::extract::FromRequest<{S}>`",
    note = "the last parameter of an axum handler is run through `FromRequest` (or \
            `FromRequestParts`): implement `axum::extract::FromRequest<{S}>` for `{Self}`, \
            or `axum::extract::FromRequestParts<{S}>` if it reads only the head"
)]
pub trait BodyExtractor<S, M>: FromRequest<S, M> {}

impl<T: FromRequest<S, M>, S, M> BodyExtractor<S, M> for T {}

/// Runs one of the handler's extractors but the last on the request's head, in
/// declaration order. A rejection is answered as axum would answer it, before any claim.
#[doc(hidden)]
pub async fn extract_parts<T, S>(extraction: &mut Extraction, state: &S) -> Result<T, Response>
where
    T: PartsExtractor<S>,
    S: Send + Sync,
{
    T::from_request_parts(&mut extraction.parts, state)
        .await
        .map_err(IntoResponse::into_response)
}

/// An extraction's future behind a box ([`extract_parts_boxed`], [`extract_last_boxed`]).
#[doc(hidden)]
pub type Extracting<'a, T> = Pin<Box<dyn Future<Output = Result<T, Response>> + Send + 'a>>;

/// [`extract_parts`] behind a box, for a handler with `state = ..`. rustc checks that the
/// handler's future is `Send` with every lifetime in the types it holds made general, and
/// then proves each extractor's bound again for those types: with a state type that holds
/// a reference (`AppState<Shop, &'static str>`), `State<..>`'s `FromRef` bound holds for
/// that one lifetime only ("implementation of `FromRef` is not general enough"). Behind
/// the box the handler's future holds a `dyn Future + Send`, and the bound is proved once,
/// here, for the lifetimes the handler names.
#[doc(hidden)]
pub fn extract_parts_boxed<'a, T, S>(
    extraction: &'a mut Extraction,
    state: &'a S,
) -> Extracting<'a, T>
where
    T: PartsExtractor<S> + 'a,
    S: Send + Sync,
{
    Box::pin(extract_parts::<T, S>(extraction, state))
}

/// [`extract_last`] behind a box, for a handler with `state = ..`, for the reason
/// [`extract_parts_boxed`] gives.
#[doc(hidden)]
pub fn extract_last_boxed<'a, T, S, M>(extraction: Extraction, state: &'a S) -> Extracting<'a, T>
where
    T: BodyExtractor<S, M> + 'a,
    S: Send + Sync,
    M: 'a,
{
    Box::pin(extract_last::<T, S, M>(extraction, state))
}

impl Extraction {
    /// The head, for an extractor the layer runs (the scope's).
    pub(crate) fn parts_mut(&mut self) -> &mut Parts {
        &mut self.parts
    }

    /// The whole request again, the buffered body included.
    pub(crate) fn into_request(self) -> Request {
        Request::from_parts(self.parts, self.body.into())
    }
}

/// Runs the handler's last extractor on the whole request, the buffered body included.
#[doc(hidden)]
pub async fn extract_last<T, S, M>(extraction: Extraction, state: &S) -> Result<T, Response>
where
    T: BodyExtractor<S, M>,
    S: Send + Sync,
{
    T::from_request(extraction.into_request(), state)
        .await
        .map_err(IntoResponse::into_response)
}

impl<C: Configured> Prepared<C> {
    /// The request for the extractors. axum decodes no `Content-Encoding` itself (tower-http's
    /// `RequestDecompressionLayer` does, in front of the handler, and removes the header), so
    /// the extractors get the decoded content without `Content-Encoding`, as that layer
    /// leaves it: they read exactly the bytes that were fingerprinted. The body as sent is
    /// in the extensions, for [`SignedWebhook`](crate::SignedWebhook)'s signature.
    pub fn extraction(&self) -> Extraction {
        let mut parts = self.head.clone();
        parts.extensions.insert(RawBody(self.body.clone()));
        if decode::decodes(&parts.headers) {
            parts.headers.remove(CONTENT_ENCODING);
            parts
                .headers
                .insert(CONTENT_LENGTH, HeaderValue::from(self.content.len()));
        }
        Extraction {
            parts,
            body: self.content.clone(),
        }
    }

    /// The request as the core reads it.
    fn exchange(&self) -> Exchange<'_, C, Axum, HeaderMap> {
        let uri = &self.head.uri;
        Exchange {
            idem: &self.idem,
            policy: self.policy,
            method: self.head.method.as_str(),
            target: uri
                .path_and_query()
                .map_or_else(|| uri.path(), |pq| pq.as_str()),
            headers: &self.head.headers,
            raw: &self.body,
            content: &self.content,
            framework: PhantomData,
        }
    }
}

impl<DB: Backend> Prepared<Idem<DB>> {
    /// Claims the key, runs `handler` in the transaction, records its response and
    /// commits; or replays, or answers the problem the protocol calls for.
    pub async fn run<F>(self, scope: &str, handler: F) -> Response
    where
        F: for<'t> AsyncFnOnce(Tx<'t, DB>) -> Response,
    {
        self.exchange().run(scope, handler).await
    }

    /// The phased form: claims the key with a lease (or takes over an attempt whose lease
    /// ran out), runs the handler with [`Phases`], and records its response.
    pub async fn run_phased<F>(self, scope: &str, lease: Duration, handler: F) -> Response
    where
        F: AsyncFnOnce(Phases<DB>) -> Response,
    {
        self.exchange().run_phased(scope, lease, handler).await
    }
}

impl<DB: Backend> Prepared<Idem<DB>> {
    /// The layer's form: claims the key, lends the transaction to `handler` (the route
    /// behind the layer) and records its response with its writes.
    pub(crate) async fn run_lent<F>(self, scope: &str, handler: F) -> Response
    where
        F: AsyncFnOnce(LentTx<DB>) -> Response,
    {
        self.exchange().run_lent(scope, handler).await
    }
}

#[cfg(feature = "redis")]
impl Prepared<RedisIdem> {
    /// The phased form with the key in Redis: claims it with a lease (or takes over an
    /// attempt whose lease ran out), runs the handler with [`Steps`], and records its
    /// answer.
    pub async fn run_steps<F>(self, scope: &str, lease: Duration, handler: F) -> Response
    where
        F: AsyncFnOnce(Steps) -> Response,
    {
        self.exchange().run_steps(scope, lease, handler).await
    }
}
