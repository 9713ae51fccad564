//! The verification harness: idem's checks (concurrency, replay, mismatch, missing key,
//! transient failure, crash-resume, expiry) run by an application's own tests against its
//! own handlers, on its real database (feature `testing`).
//!
//! idem cannot see what a handler does outside its transaction. A handler that writes to
//! the pool instead of `tx` and then answers 503 leaves the write behind while the key
//! rolls back, and the retry writes again; a phased handler that calls its provider
//! without [`Phases::derived_key`](crate::Phases::derived_key) charges twice after a
//! crash. These checks catch such mistakes from the outside, through the effect counter
//! the test gives: a closure that counts the business rows or the provider's calls.
//!
//! Describe the endpoint once, then run the checks on the application: an actix-web test
//! service (`actix_web::test::init_service`) or an axum `Router` (see [`Target`]). Each
//! check returns [`Passed`] or a [`Failed`] whose message names the check, what it
//! expected and what it saw; [`all`](Endpoint::all) runs every check that applies to the
//! endpoint's form. Every check draws fresh keys, so checks may run in any order on one
//! database.
//!
//! ```no_run
//! use idem_runtime::testing::Endpoint;
//! use serde_json::json;
//!
//! async fn count_orders(pool: &sqlx::PgPool) -> i64 {
//!     sqlx::query_scalar("SELECT count(*) FROM orders")
//!         .fetch_one(pool)
//!         .await
//!         .expect("count orders")
//! }
//!
//! # async fn test<M>(
//! #     pool: sqlx::PgPool,
//! #     app: impl idem_runtime::testing::Target<M>,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! let counted = pool.clone();
//! let endpoint = Endpoint::post("/orders")
//!     .header("x-account-id", "1001")
//!     .json(json!({ "item": "book" }))
//!     .mismatch_json(json!({ "item": "pen" }))
//!     .effect(move || {
//!         let pool = counted.clone();
//!         async move { count_orders(&pool).await }
//!     })
//!     // How this application's test build makes the handler fail once.
//!     .fail_request(|request| request.query("fail=500"))
//!     .store(&pool);
//! endpoint.concurrency(&app).await?;
//! endpoint.all(&app).await?;
//! # Ok(())
//! # }
//! ```
//!
//! What each check sends and expects is said on its method. The harness's own reads of
//! the key table (whether a key row is left, ending a lease, moving a key's retention into
//! the past) are test-only calls of the store, never made by the runtime itself.

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures_util::future::LocalBoxFuture;
use http::{HeaderMap, HeaderName, Method};
use sqlx::Pool;

use crate::store::Backend;

mod checks;
mod outcome;
mod request;
mod store;
mod target;

pub use outcome::{Failed, Passed};
pub use request::TestRequest;
use request::header_name;
#[cfg(feature = "actix")]
pub use target::ActixService;
#[cfg(feature = "axum")]
pub use target::AxumRouter;
pub use target::Target;

use store::KeyStore;

/// How many copies of the request the concurrency check sends at once, by default.
///
/// ```
/// assert_eq!(idem_runtime::testing::DEFAULT_PARALLEL, 20);
/// ```
pub const DEFAULT_PARALLEL: usize = 20;

type Hook = Rc<dyn Fn(TestRequest) -> TestRequest>;
type Counter = Rc<dyn Fn() -> LocalBoxFuture<'static, i64>>;
type KeysProbe = Rc<dyn Fn() -> LocalBoxFuture<'static, Vec<String>>>;

/// One endpoint and what the checks need to know about it: the request, a second body
/// for the mismatch check, the effect counter, the failure and crash hooks, the pool.
///
/// Built with the method's constructor ([`post`](Self::post), ..) and the builder
/// methods; the checks take `&self`, so one endpoint runs every check. The request is
/// sent as given, with an `Idempotency-Key` the check draws fresh (none for
/// [`missing_key`](Self::missing_key)).
///
/// ```
/// use idem_runtime::testing::Endpoint;
///
/// let endpoint = Endpoint::post("/orders")
///     .header("authorization", "Bearer acct-1")
///     .json(serde_json::json!({ "item": "book" }))
///     .parallel(8);
/// # let _ = endpoint;
/// ```
#[derive(Clone)]
pub struct Endpoint {
    request: TestRequest,
    mismatch_body: Option<Bytes>,
    other_route: Option<String>,
    effect: Option<Counter>,
    fail: Option<Hook>,
    phased: bool,
    crash: Option<(String, Hook)>,
    derived_keys: Option<KeysProbe>,
    store: Option<KeyStore>,
    parallel: usize,
    replay_headers: Vec<HeaderName>,
    key_header: HeaderName,
    sign: Option<Hook>,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("request", &self.request)
            .field("other_route", &self.other_route)
            .field("effect", &self.effect.is_some())
            .field("fail", &self.fail.is_some())
            .field("phased", &self.phased)
            .field("crash_after", &self.crash.as_ref().map(|(phase, _)| phase))
            .field("store", &self.store)
            .field("parallel", &self.parallel)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint answering `method` at `uri` (a path, with a query if the route reads
    /// one), with no headers and an empty body.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::new(http::Method::PUT, "/carts/7");
    /// # let _ = endpoint;
    /// ```
    pub fn new(method: Method, uri: impl Into<String>) -> Self {
        Self {
            request: TestRequest {
                method,
                uri: uri.into(),
                headers: HeaderMap::new(),
                body: Bytes::new(),
            },
            mismatch_body: None,
            other_route: None,
            effect: None,
            fail: None,
            phased: false,
            crash: None,
            derived_keys: None,
            store: None,
            parallel: DEFAULT_PARALLEL,
            replay_headers: Vec::new(),
            key_header: crate::protocol::headers::IDEMPOTENCY_KEY,
            sign: None,
        }
    }

    /// `POST uri`.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/orders");
    /// # let _ = endpoint;
    /// ```
    pub fn post(uri: impl Into<String>) -> Self {
        Self::new(Method::POST, uri)
    }

    /// `PUT uri`.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::put("/carts/7");
    /// # let _ = endpoint;
    /// ```
    pub fn put(uri: impl Into<String>) -> Self {
        Self::new(Method::PUT, uri)
    }

    /// `PATCH uri`.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::patch("/carts/7");
    /// # let _ = endpoint;
    /// ```
    pub fn patch(uri: impl Into<String>) -> Self {
        Self::new(Method::PATCH, uri)
    }

    /// `DELETE uri`.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::delete("/carts/7");
    /// # let _ = endpoint;
    /// ```
    pub fn delete(uri: impl Into<String>) -> Self {
        Self::new(Method::DELETE, uri)
    }

    /// A header sent with every request of every check: what authenticates the caller,
    /// say. A second value for the same name is added beside the first.
    ///
    /// # Panics
    /// If `name` or `value` is not a valid header name or value.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/orders").header("x-account-id", "1001");
    /// # let _ = endpoint;
    /// ```
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.request = self.request.append_header(name, value);
        self
    }

    /// The request's body, as JSON, with `Content-Type: application/json`.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/orders")
    ///     .json(serde_json::json!({ "item": "book" }));
    /// # let _ = endpoint;
    /// ```
    pub fn json(self, body: serde_json::Value) -> Self {
        self.body("application/json", body.to_string())
    }

    /// The request's body with its `Content-Type`.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/orders")
    ///     .body("application/x-www-form-urlencoded", "item=book");
    /// # let _ = endpoint;
    /// ```
    pub fn body(mut self, content_type: &str, body: impl Into<Bytes>) -> Self {
        self.request = self.request.header("content-type", content_type).body(body);
        self
    }

    /// A second body, different from the request's, that the mismatch check sends with
    /// the same key (as JSON).
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/orders")
    ///     .json(serde_json::json!({ "item": "book" }))
    ///     .mismatch_json(serde_json::json!({ "item": "pen" }));
    /// # let _ = endpoint;
    /// ```
    pub fn mismatch_json(self, body: serde_json::Value) -> Self {
        self.mismatch_body(body.to_string())
    }

    /// A second body, different from the request's, that the mismatch check sends with
    /// the same key and the same headers.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/orders")
    ///     .body("text/plain", "book")
    ///     .mismatch_body("pen");
    /// # let _ = endpoint;
    /// ```
    pub fn mismatch_body(mut self, body: impl Into<Bytes>) -> Self {
        self.mismatch_body = Some(body.into());
        self
    }

    /// Another idempotent route of the same application and scope: the mismatch check
    /// sends the request there with the same key, which must be answered 422.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/orders").other_route("/refunds");
    /// # let _ = endpoint;
    /// ```
    pub fn other_route(mut self, uri: impl Into<String>) -> Self {
        self.other_route = Some(uri.into());
        self
    }

    /// The effect counter: counts what the endpoint does once per operation (its
    /// business rows, the provider's charges). Checks compare it before and after. Count
    /// through a pool of your own, never through a connection a request holds.
    ///
    /// Without it the checks see only the answers: a double effect goes unnoticed.
    ///
    /// ```no_run
    /// # fn f(pool: sqlx::PgPool) {
    /// let endpoint = idem_runtime::testing::Endpoint::post("/orders").effect(move || {
    ///     let pool = pool.clone();
    ///     async move {
    ///         sqlx::query_scalar::<_, i64>("SELECT count(*) FROM orders")
    ///             .fetch_one(&pool)
    ///             .await
    ///             .expect("count orders")
    ///     }
    /// });
    /// # }
    /// ```
    pub fn effect<F, Fut>(mut self, count: F) -> Self
    where
        F: Fn() -> Fut + 'static,
        Fut: Future<Output = i64> + 'static,
    {
        self.effect = Some(Rc::new(move || Box::pin(count())));
        self
    }

    /// How the application's test build makes the handler fail once: the hook changes
    /// the request (a header or a query parameter the handler honours) so that it answers
    /// a 5xx, or a transient 4xx such as 429, after doing its work. Used by
    /// [`transient_failure`](Self::transient_failure).
    ///
    /// For a phased endpoint, change a header: the key stays in progress after the
    /// failure, and the retry without the hook must have the same fingerprint (method,
    /// path, query, body).
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/orders")
    ///     .fail_request(|request| request.header("x-test-fail", "503"));
    /// # let _ = endpoint;
    /// ```
    pub fn fail_request(mut self, hook: impl Fn(TestRequest) -> TestRequest + 'static) -> Self {
        self.fail = Some(Rc::new(hook));
        self
    }

    /// The endpoint is a phased handler (`#[idempotent(lease = ..)]` with
    /// [`Phases`](crate::Phases)): a failure leaves the key in progress for the retry to
    /// resume, and [`all`](Self::all) runs `crash_resume` when a crash hook is given.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/payments").phased();
    /// # let _ = endpoint;
    /// ```
    pub fn phased(mut self) -> Self {
        self.phased = true;
        self
    }

    /// How the application's test build makes a phased handler crash after the phase
    /// `phase` committed: the hook changes the request (a header the handler honours),
    /// and the handler then calls [`crash`] (which never returns) at its crash point, for
    /// example inside the next phase, after it called its provider. The harness drops the
    /// request there, as a process that died would. Implies [`phased`](Self::phased).
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/payments")
    ///     .crash_after("payment_created", |request| request.header("x-test-crash", "charge"));
    /// # let _ = endpoint;
    /// ```
    pub fn crash_after(
        mut self,
        phase: &str,
        hook: impl Fn(TestRequest) -> TestRequest + 'static,
    ) -> Self {
        self.phased = true;
        self.crash = Some((phase.to_owned(), Rc::new(hook)));
        self
    }

    /// Reads the keys the provider saw (every `Idempotency-Key` the handler sent it, in
    /// any order, repeats allowed): `crash_resume` checks that the retry sent no key the
    /// crashed attempt had not, i.e. that it called with the same derived keys.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    ///
    /// let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    /// let endpoint = idem_runtime::testing::Endpoint::post("/payments").derived_keys(move || {
    ///     let seen = seen.clone();
    ///     async move { seen.lock().unwrap().clone() }
    /// });
    /// # let _ = endpoint;
    /// ```
    pub fn derived_keys<F, Fut>(mut self, keys: F) -> Self
    where
        F: Fn() -> Fut + 'static,
        Fut: Future<Output = Vec<String>> + 'static,
    {
        self.derived_keys = Some(Rc::new(move || Box::pin(keys())));
        self
    }

    /// The pool of the `Idem` the application registers (PostgreSQL or SQLite): the
    /// harness's test-only reads and writes of the key table go through it, and
    /// `transient_failure`, `crash_resume` and `expiry` need it.
    ///
    /// ```no_run
    /// # fn f(pool: sqlx::SqlitePool) {
    /// let endpoint = idem_runtime::testing::Endpoint::post("/orders").store(&pool);
    /// # }
    /// ```
    pub fn store<DB: Backend>(mut self, pool: &Pool<DB>) -> Self {
        self.store = Some(KeyStore::of(pool));
        self
    }

    /// How many copies of the request the concurrency check sends at once (default
    /// [`DEFAULT_PARALLEL`]). Size the application's pool for them.
    ///
    /// # Panics
    /// If `copies` is below 2.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/orders").parallel(5);
    /// # let _ = endpoint;
    /// ```
    pub fn parallel(mut self, copies: usize) -> Self {
        assert!(
            copies >= 2,
            "idem::testing: parallel needs at least 2 copies"
        );
        self.parallel = copies;
        self
    }

    /// A header the application added to idem's replayed headers
    /// ([`Idem::replay_header`](crate::Idem::replay_header)): the replay check compares
    /// it too, beside idem's defaults (`Location`, `Content-Type`, `Content-Location`,
    /// `ETag`, `Last-Modified`, `Retry-After`).
    ///
    /// # Panics
    /// If `name` is not a valid header name.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/orders").replay_header("x-order-version");
    /// # let _ = endpoint;
    /// ```
    pub fn replay_header(mut self, name: &str) -> Self {
        self.replay_headers.push(header_name(name));
        self
    }

    /// The header the endpoint takes its key from, for a webhook receiver keyed by
    /// `key = header("webhook-id")`; `Idempotency-Key` by default. The missing-key check
    /// then expects 400 `event-id-missing`.
    ///
    /// # Panics
    /// If `name` is not a valid header name.
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/webhooks/provider").key_header("webhook-id");
    /// # let _ = endpoint;
    /// ```
    pub fn key_header(mut self, name: &str) -> Self {
        self.key_header = header_name(name);
        self
    }

    /// Applied last to every request the harness sends, once its key and body are set: a
    /// webhook receiver's test signs each delivery here, as its sender would (the key
    /// changes from check to check, and the signature covers it).
    ///
    /// ```
    /// let endpoint = idem_runtime::testing::Endpoint::post("/webhooks/provider")
    ///     .key_header("webhook-id")
    ///     .sign(|request| {
    ///         let id = request.headers().get("webhook-id").cloned();
    ///         let signature = format!("v1,{}-{}", id.is_some(), request.payload().len());
    ///         request.header("webhook-signature", &signature)
    ///     });
    /// # let _ = endpoint;
    /// ```
    pub fn sign(mut self, hook: impl Fn(TestRequest) -> TestRequest + 'static) -> Self {
        self.sign = Some(Rc::new(hook));
        self
    }
}

tokio::task_local! {
    /// Set by the crash-resume check around the request it crashes; [`crash`] raises it.
    static CRASHED: Rc<Cell<bool>>;
}

/// The crash point of a phased handler under [`Endpoint::crash_after`]: tells the harness
/// that the handler got there, and never returns, so the harness drops the request as a
/// process that died would (the committed phases stay, the lease stays held).
///
/// Call it only where the crash hook asks for it (the test build's header, say). It
/// works when the request is polled by the harness's crash-resume check, in its task, as
/// it is for actix-web's test service and an axum `Router`.
///
/// # Panics
/// Outside the crash-resume check: then the handler panics, which idem answers 500.
///
/// ```no_run
/// # async fn phase(crash_requested: bool) {
/// if crash_requested {
///     match idem_runtime::testing::crash().await {}
/// }
/// # }
/// ```
pub async fn crash() -> std::convert::Infallible {
    let inside = CRASHED.try_with(|crashed| crashed.set(true)).is_ok();
    assert!(
        inside,
        "idem::testing::crash() was called outside the harness's crash_resume check; \
         call it only when the check's crash hook asks for it"
    );
    std::future::pending().await
}

/// A key no other check or test uses: the process, the time and a counter.
fn fresh_key(check: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    format!(
        "idem-testing-{check}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
