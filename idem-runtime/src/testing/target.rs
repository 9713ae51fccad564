//! What the checks send requests to: an actix-web test service or an axum `Router`,
//! in-process, through one small trait in `http` 1.x types.

use bytes::Bytes;
use futures_util::future::LocalBoxFuture;

/// An application the harness sends requests to, in-process.
///
/// Implemented for actix-web's test service (what `actix_web::test::init_service`
/// returns, feature `actix`) and for an axum [`Router`](::axum::Router) (feature `axum`).
/// `M` tells the two implementations apart and is inferred: write `endpoint.all(&app)`.
///
/// Requests are polled in the caller's task, on its thread, as both frameworks' test
/// services do: actix-web's services are not `Send`, so the concurrency check runs its
/// copies with `join_all` on one thread, and [`crash`](super::crash) can tell the
/// harness where the handler stopped. Another implementation (a client for a server in
/// another process, say) works for every check but `crash_resume`.
///
/// ```
/// use bytes::Bytes;
/// use futures_util::future::LocalBoxFuture;
/// use idem_runtime::testing::Target;
///
/// /// Answers every request 204, for a test of the harness itself.
/// struct NoContent;
///
/// impl Target<()> for NoContent {
///     fn send(&self, _: http::Request<Bytes>) -> LocalBoxFuture<'_, http::Response<Bytes>> {
///         Box::pin(async {
///             let mut response = http::Response::new(Bytes::new());
///             *response.status_mut() = http::StatusCode::NO_CONTENT;
///             response
///         })
///     }
/// }
/// ```
pub trait Target<M> {
    /// Sends `request` and reads the whole answer.
    fn send(&self, request: http::Request<Bytes>) -> LocalBoxFuture<'_, http::Response<Bytes>>;
}

/// The [`Target`] marker of actix-web services (`actix_web::test::init_service`), whose
/// responses have bodies of type `B`. Never built; it only tells the impls apart.
#[cfg(feature = "actix")]
#[derive(Debug)]
pub struct ActixService<B>(std::marker::PhantomData<fn() -> B>);

#[cfg(feature = "actix")]
impl<S, B> Target<ActixService<B>> for S
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
        >,
    B: actix_web::body::MessageBody,
{
    fn send(&self, request: http::Request<Bytes>) -> LocalBoxFuture<'_, http::Response<Bytes>> {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            // actix-web 4 is on `http` 0.2: the request is rebuilt from its bytes.
            let method = actix_web::http::Method::from_bytes(parts.method.as_str().as_bytes())
                .expect("an HTTP method is a valid actix-web method");
            let mut test = actix_web::test::TestRequest::default()
                .method(method)
                .uri(&parts.uri.to_string());
            for (name, value) in &parts.headers {
                test = test.append_header((name.as_str(), value.as_bytes()));
            }
            if !body.is_empty() {
                test = test.set_payload(body);
            }
            match self.call(test.to_request()).await {
                Ok(response) => from_actix(response.into_parts().1).await,
                Err(error) => from_actix(error.error_response()).await,
            }
        })
    }
}

#[cfg(feature = "actix")]
async fn from_actix<B: actix_web::body::MessageBody>(
    response: actix_web::HttpResponse<B>,
) -> http::Response<Bytes> {
    let mut answer = http::Response::new(Bytes::new());
    *answer.status_mut() = http::StatusCode::from_u16(response.status().as_u16())
        .expect("actix-web answers a valid status");
    for (name, value) in response.headers() {
        answer.headers_mut().append(
            http::HeaderName::from_bytes(name.as_str().as_bytes()).expect("a header name"),
            http::HeaderValue::from_bytes(value.as_bytes()).expect("a header value"),
        );
    }
    let body = actix_web::body::to_bytes(response.into_body())
        .await
        .unwrap_or_else(|error| {
            let error: Box<dyn std::error::Error> = error.into();
            panic!("idem::testing: the response body failed while it was read: {error}")
        });
    *answer.body_mut() = body;
    answer
}

/// The [`Target`] marker of an axum [`Router`](::axum::Router).
#[cfg(feature = "axum")]
#[derive(Debug)]
pub enum AxumRouter {}

#[cfg(feature = "axum")]
impl Target<AxumRouter> for ::axum::Router {
    fn send(&self, request: http::Request<Bytes>) -> LocalBoxFuture<'_, http::Response<Bytes>> {
        use tower_service::Service;
        // A `Router` is a handle: each request gets a clone, as `oneshot` would.
        let mut router = self.clone();
        Box::pin(async move {
            let request = request.map(::axum::body::Body::from);
            let ready = futures_util::future::poll_fn(|cx| {
                Service::<::axum::extract::Request>::poll_ready(&mut router, cx)
            });
            let Ok(()) = ready.await;
            let Ok(response) = router.call(request).await;
            let (parts, body) = response.into_parts();
            let body = ::axum::body::to_bytes(body, usize::MAX)
                .await
                .unwrap_or_else(|error| {
                    panic!("idem::testing: the response body failed while it was read: {error}")
                });
            http::Response::from_parts(parts, body)
        })
    }
}
