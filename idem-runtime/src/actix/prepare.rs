//! Reading an actix-web request for the core, and the handler's inputs and answer.

use std::marker::PhantomData;
use std::time::Duration;

use actix_web::body::BodyLimitExceeded;
use actix_web::dev::Payload;
use actix_web::http::header::HeaderMap;
use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse, Responder};

use super::framework::{Actix, problem_response};
use crate::protocol::config::{Configured, Idem};
use crate::protocol::exchange::Exchange;
use crate::protocol::fingerprint::decode::BodyLimit;
use crate::protocol::phased::Phases;
use crate::protocol::policy::Policy;
use crate::protocol::problem::ProblemKind;
#[cfg(feature = "redis")]
use crate::protocol::redis::{RedisIdem, Steps};
use crate::protocol::tx::Tx;
use crate::store::Backend;

/// A request whose body is read, before any extractor ran.
#[doc(hidden)]
#[derive(Debug)]
pub struct Prepared<C> {
    /// The key store's configuration: an [`Idem`], or Redis's.
    idem: C,
    policy: &'static Policy,
    req: HttpRequest,
    /// The body as sent, for the extractors, which decode it themselves.
    body: Bytes,
    /// The body decoded from its `Content-Encoding`, for the fingerprint: what the
    /// extractors read. The same bytes as `body` when nothing is to be decoded.
    content: Bytes,
}

/// Finds the configuration registered with `App::app_data`, plain or in `web::Data`.
fn idem_of<C: Configured>(req: &HttpRequest) -> Option<&C> {
    req.app_data::<C>()
        .or_else(|| req.app_data::<web::Data<C>>().map(|data| data.get_ref()))
}

/// Buffers the body (413 past the limit) so each extractor can read it, and decodes its
/// `Content-Encoding` for the fingerprint (413 when the decoded content is past the limit,
/// 400 when it does not decode), before any extractor could inflate it unbounded. The key
/// is checked after the extractors, so that e.g. an unauthenticated request gets the
/// application's 401 rather than a 400 about its key.
#[doc(hidden)]
pub async fn prepare<DB: Backend>(
    policy: &'static Policy,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<Prepared<Idem<DB>>, HttpResponse> {
    prepare_with(policy, req, payload).await
}

/// [`prepare`] for a handler whose keys live in Redis (`store = redis`).
#[cfg(feature = "redis")]
#[doc(hidden)]
pub async fn prepare_redis(
    policy: &'static Policy,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<Prepared<RedisIdem>, HttpResponse> {
    prepare_with(policy, req, payload).await
}

async fn prepare_with<C: Configured>(
    policy: &'static Policy,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<Prepared<C>, HttpResponse> {
    let Some(idem) = idem_of::<C>(&req).cloned() else {
        tracing::error!(
            handler = policy.handler(),
            "idem is not configured: register it with App::app_data({})",
            C::REGISTER
        );
        return Err(problem_response(ProblemKind::NotConfigured.problem(
            "the server has no idempotency store configured; this is a server bug",
        )));
    };
    let limit = BodyLimit(idem.settings().max_request_bytes());
    limit
        .check_declared(req.headers())
        .map_err(problem_response)?;
    let body = match payload.to_bytes_limited(limit.0).await {
        Ok(Ok(body)) => body,
        Ok(Err(error)) => return Err(error.error_response()),
        Err(BodyLimitExceeded { .. }) => return Err(problem_response(limit.too_large())),
    };
    let content = limit
        .content(req.headers(), &body)
        .await
        .map_err(problem_response)?;
    super::webhook::keep_raw_body(&req, &body);
    Ok(Prepared {
        idem,
        policy,
        req,
        body,
        content,
    })
}

/// The result of one of the handler's extractors, run over the buffered body in
/// declaration order: a failure is answered with the extractor's own error response,
/// before any claim. The macro calls `<T as FromRequest>::from_request` itself, spanned
/// at the parameter's type, so that a type that is no extractor is reported there alone,
/// with no bound of this function in the message.
// The error is the response to send, returned once per extractor straight to the
// generated handler's `return`, as `prepare`'s is: boxing it would buy nothing.
#[allow(clippy::result_large_err)]
#[doc(hidden)]
pub fn extracted<T, E: Into<actix_web::Error>>(result: Result<T, E>) -> Result<T, HttpResponse> {
    result.map_err(|error| HttpResponse::from_error(error.into()))
}

/// Converts the handler's return value while the request is at hand. A helper rather
/// than `Responder::respond_to` written out, which would report a type that is no
/// `Responder` twice: at the call and where its body type is boxed.
#[doc(hidden)]
pub fn respond<R: Responder>(value: R, req: &HttpRequest) -> HttpResponse {
    value.respond_to(req).map_into_boxed_body()
}

impl<C: Configured> Prepared<C> {
    /// The request, for the handler's extractors.
    pub fn request(&self) -> &HttpRequest {
        &self.req
    }

    /// A fresh payload over the buffered body as sent: extractors decode it as they
    /// would without idem, into the content that is fingerprinted.
    pub fn payload(&self) -> Payload {
        Payload::from(self.body.clone())
    }

    /// The request as the core reads it.
    fn exchange(&self) -> Exchange<'_, C, Actix, HeaderMap> {
        let req = &self.req;
        Exchange {
            idem: &self.idem,
            policy: self.policy,
            method: req.method().as_str(),
            target: req
                .uri()
                .path_and_query()
                .map_or_else(|| req.path(), |pq| pq.as_str()),
            headers: req.headers(),
            raw: &self.body,
            content: &self.content,
            framework: PhantomData,
        }
    }
}

impl<DB: Backend> Prepared<Idem<DB>> {
    /// Claims the key, runs `handler` in the transaction, records its response and
    /// commits; or replays, or answers the problem the protocol calls for.
    pub async fn run<F>(self, scope: &str, handler: F) -> HttpResponse
    where
        F: for<'t> AsyncFnOnce(Tx<'t, DB>) -> HttpResponse,
    {
        self.exchange().run(scope, handler).await
    }

    /// The phased form: claims the key with a lease (or takes over an attempt whose lease
    /// ran out), runs the handler with [`Phases`], and records its response.
    pub async fn run_phased<F>(self, scope: &str, lease: Duration, handler: F) -> HttpResponse
    where
        F: AsyncFnOnce(Phases<DB>) -> HttpResponse,
    {
        self.exchange().run_phased(scope, lease, handler).await
    }
}

#[cfg(feature = "redis")]
impl Prepared<RedisIdem> {
    /// The phased form with the key in Redis: claims it with a lease (or takes over an
    /// attempt whose lease ran out), runs the handler with [`Steps`], and records its
    /// answer.
    pub async fn run_steps<F>(self, scope: &str, lease: Duration, handler: F) -> HttpResponse
    where
        F: AsyncFnOnce(Steps) -> HttpResponse,
    {
        self.exchange().run_steps(scope, lease, handler).await
    }
}
