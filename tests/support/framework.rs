//! The application under test on either web framework, in-process: actix-web's test
//! service or an axum `Router` called as a tower service. Both run concurrent calls
//! concurrently, so a test's `join_all` overlaps its requests on either.
//!
//! Which framework [`service`] builds is the test thread's choice, made by the test
//! function that `backend_tests!` generates ([`Framework::select`]); the test body never
//! names a framework. Both frameworks' test runtimes (`actix_web::test`) run the whole
//! test on the thread that started it, so a thread-local is the test's own.

use std::cell::Cell;
use std::rc::Rc;

use actix_web::App;
use actix_web::test as actix_test;
use actix_web::web;
use futures_util::future::LocalBoxFuture;
use http::{HeaderMap, HeaderName, HeaderValue};
use tower::ServiceExt;

use super::{Reply, TestBackend, TestRequest};

/// The web framework a test's application is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framework {
    Actix,
    Axum,
}

thread_local! {
    static FRAMEWORK: Cell<Framework> = const { Cell::new(Framework::Actix) };
}

impl Framework {
    /// Makes `self` the framework every [`service`] on this thread builds.
    pub(crate) fn select(self) {
        FRAMEWORK.set(self);
    }

    /// The framework this test runs on.
    pub(crate) fn current() -> Self {
        FRAMEWORK.get()
    }

    /// The example binary on this framework, for the tests that start it as a process
    /// (`phased_support::Example::start`).
    pub(crate) fn example(self) -> &'static str {
        match self {
            Self::Actix => "orders",
            Self::Axum => "orders-axum",
        }
    }
}

/// The application under test, in-process: requests go straight to its service.
pub(crate) struct TestApp {
    send: Box<dyn Fn(TestRequest) -> LocalBoxFuture<'static, Reply>>,
}

impl std::fmt::Debug for TestApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TestApp")
    }
}

impl TestApp {
    /// Sends a request and reads the whole response. Calls may run concurrently.
    pub(crate) fn call(&self, req: TestRequest) -> LocalBoxFuture<'static, Reply> {
        (self.send)(req)
    }
}

/// The example's application exactly as `main` builds it, on the test's framework.
pub(crate) async fn service<DB: TestBackend>(idem: &idem::Idem<DB>) -> TestApp {
    match Framework::current() {
        Framework::Actix => actix(idem, |_| {}, |_| {}).await,
        Framework::Axum => axum(DB::axum_router(idem)),
    }
}

/// The example's application with `extra` registered after it (test-only actix handlers
/// and their app data). actix-web only: a test that uses it runs through
/// `actix_only_tests!`, or gives its routes an axum twin with [`service_with_twin`].
pub(crate) async fn service_with<DB: TestBackend>(
    idem: &idem::Idem<DB>,
    extra: impl FnOnce(&mut web::ServiceConfig),
) -> TestApp {
    assert_actix("service_with");
    actix(idem, |_| {}, extra).await
}

/// The example's application with `extra` registered before it: for a test route on one
/// of the example's paths with another method, which the example's resource for that
/// path would otherwise answer 405. actix-web only, like [`service_with`].
pub(crate) async fn service_before<DB: TestBackend>(
    idem: &idem::Idem<DB>,
    extra: impl FnOnce(&mut web::ServiceConfig),
) -> TestApp {
    assert_actix("service_before");
    actix(idem, extra, |_| {}).await
}

/// The example's application plus test routes, given for each framework: `actix` is
/// registered after the example's routes, `axum` merged into its router (which then
/// also gets `idem` in its extensions).
pub(crate) async fn service_with_twin<DB: TestBackend>(
    idem: &idem::Idem<DB>,
    actix_routes: impl FnOnce(&mut web::ServiceConfig),
    axum_routes: impl FnOnce() -> axum::Router,
) -> TestApp {
    match Framework::current() {
        Framework::Actix => actix(idem, |_| {}, actix_routes).await,
        Framework::Axum => axum(with_routes(idem, axum_routes())),
    }
}

/// Like [`service_with_twin`], with the actix routes registered before the example's.
pub(crate) async fn service_before_twin<DB: TestBackend>(
    idem: &idem::Idem<DB>,
    actix_routes: impl FnOnce(&mut web::ServiceConfig),
    axum_routes: impl FnOnce() -> axum::Router,
) -> TestApp {
    match Framework::current() {
        Framework::Actix => actix(idem, actix_routes, |_| {}).await,
        Framework::Axum => axum(with_routes(idem, axum_routes())),
    }
}

/// The example's router merged with a test's routes; the test's get `idem` too.
fn with_routes<DB: TestBackend>(idem: &idem::Idem<DB>, routes: axum::Router) -> axum::Router {
    DB::axum_router(idem)
        .merge(routes)
        .layer(axum::Extension(idem.clone()))
}

fn assert_actix(helper: &str) {
    assert_eq!(
        Framework::current(),
        Framework::Actix,
        "support::{helper} registers actix-web routes: list this test in \
         `actix_only_tests!`, or give its routes an axum twin"
    );
}

/// A test's own application, without the example's: `actix_routes` configures the
/// actix-web application, `axum_routes` builds the axum router; the test's framework
/// decides which is called.
pub(crate) async fn own_service(
    actix_routes: impl FnOnce(&mut web::ServiceConfig),
    axum_routes: impl FnOnce() -> axum::Router,
) -> TestApp {
    match Framework::current() {
        Framework::Actix => actix_app(actix_routes).await,
        Framework::Axum => axum(axum_routes()),
    }
}

async fn actix<DB: TestBackend>(
    idem: &idem::Idem<DB>,
    before: impl FnOnce(&mut web::ServiceConfig),
    after: impl FnOnce(&mut web::ServiceConfig),
) -> TestApp {
    actix_app(|cfg| {
        before(cfg);
        super::app::configure(cfg, idem);
        after(cfg);
    })
    .await
}

async fn actix_app(routes: impl FnOnce(&mut web::ServiceConfig)) -> TestApp {
    let service = Rc::new(actix_test::init_service(App::new().configure(routes)).await);
    // Boxing here keeps actix's request type (from actix-http, not a dependency of this
    // crate) out of every signature.
    TestApp {
        send: Box::new(move |req| {
            let service = Rc::clone(&service);
            Box::pin(async move {
                let response =
                    actix_test::call_service(&*service, to_actix(req).to_request()).await;
                let status = response.status().as_u16();
                let headers = from_actix(response.headers());
                let body = actix_test::read_body(response).await;
                Reply {
                    status,
                    headers,
                    body,
                }
            })
        }),
    }
}

/// The request as actix-web's test kit builds it (actix-web 4 is on `http` 0.2).
fn to_actix(req: TestRequest) -> actix_test::TestRequest {
    let method = actix_web::http::Method::from_bytes(req.method.as_str().as_bytes())
        .expect("a method actix-web accepts");
    let mut actix = actix_test::TestRequest::default()
        .method(method)
        .uri(&req.uri);
    for (name, value) in &req.headers {
        actix = actix.append_header((name.as_str(), value.as_bytes()));
    }
    if !req.body.is_empty() {
        actix = actix.set_payload(req.body);
    }
    actix
}

fn from_actix(headers: &actix_web::http::header::HeaderMap) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(
            HeaderName::from_bytes(name.as_str().as_bytes()).expect("a header name"),
            HeaderValue::from_bytes(value.as_bytes()).expect("a header value"),
        );
    }
    map
}

/// `router` called in-process, one `oneshot` per request on a clone of it (a `Router`
/// is a handle: its clones share the routes).
fn axum(router: axum::Router) -> TestApp {
    TestApp {
        send: Box::new(move |req| {
            let router = router.clone();
            Box::pin(async move {
                let mut request = http::Request::new(axum::body::Body::from(req.body));
                *request.method_mut() = req.method;
                *request.uri_mut() = req.uri.parse().expect("a request target");
                *request.headers_mut() = req.headers;
                let response = match router.oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                let (head, body) = response.into_parts();
                let body = axum::body::to_bytes(body, usize::MAX)
                    .await
                    .expect("read the response body");
                Reply {
                    status: head.status.as_u16(),
                    headers: head.headers,
                    body,
                }
            })
        }),
    }
}

/// The example's application plus test routes, as [`service_with_twin`] builds it,
/// behind a real HTTP server on a free loopback port: for the tests of what crosses a
/// socket. The server's base URL, and what stops it.
pub(crate) async fn serve_with_twin<DB: TestBackend>(
    idem: &idem::Idem<DB>,
    actix_routes: impl Fn(&mut web::ServiceConfig) + Clone + Send + 'static,
    axum_routes: axum::Router,
) -> (String, Server) {
    match Framework::current() {
        Framework::Actix => {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            let base = format!("http://{}", listener.local_addr().expect("bound"));
            let idem = idem.clone();
            let server = actix_web::HttpServer::new(move || {
                let (idem, routes) = (idem.clone(), actix_routes.clone());
                App::new()
                    .configure(|cfg| super::app::configure(cfg, &idem))
                    .configure(routes)
            })
            .workers(1)
            .disable_signals()
            .listen(listener)
            .expect("listens")
            .run();
            let handle = server.handle();
            actix_web::rt::spawn(server);
            (base, Server::Actix(handle))
        }
        Framework::Axum => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a free port");
            let base = format!("http://{}", listener.local_addr().expect("bound"));
            let router = with_routes(idem, axum_routes);
            let task = tokio::spawn(async move {
                axum::serve(listener, router).await.expect("serves");
            });
            (base, Server::Axum(task))
        }
    }
}

/// A server [`serve_with_twin`] started.
pub(crate) enum Server {
    Actix(actix_web::dev::ServerHandle),
    Axum(tokio::task::JoinHandle<()>),
}

impl Server {
    /// Stops it: actix-web's gracefully, axum's task at once.
    pub(crate) async fn stop(self) {
        match self {
            Self::Actix(handle) => handle.stop(true).await,
            Self::Axum(task) => task.abort(),
        }
    }
}
