//! Idempotency keys for actix-web handlers, enforced by the database: PostgreSQL (feature
//! `postgres`), or SQLite compiled in (feature `sqlite`); both are on by default.
//!
//! A client may send the same request any number of times, concurrently or after a
//! timeout; the handler's side effect happens once and every attempt gets the same
//! answer. The database, not timing, prevents duplicates: the key row and the
//! handler's business writes commit in one transaction.
//!
//! ```no_run
//! use actix_web::{App, HttpResponse, HttpServer, post, web};
//! use idem::idempotent;
//!
//! #[derive(serde::Deserialize)]
//! struct NewOrder {
//!     item: String,
//! }
//!
//! // Keys are scoped by the authenticated caller, which the application's authentication
//! // middleware put in the request's extensions: one account's key never touches
//! // another's, and a stored answer is replayed only to the account that made it.
//! #[post("/orders")]
//! #[idempotent(scope = account, retention = "24h")]
//! async fn create_order(
//!     account: web::ReqData<i64>,
//!     tx: idem::Tx<'_, sqlx::Postgres>,
//!     body: web::Json<NewOrder>,
//! ) -> actix_web::Result<HttpResponse> {
//!     let id: i64 = sqlx::query_scalar(
//!         "INSERT INTO orders (account_id, item) VALUES ($1, $2) RETURNING id",
//!     )
//!     .bind(*account)
//!     .bind(&body.item)
//!     .fetch_one(&mut *tx)
//!     .await
//!     .map_err(actix_web::error::ErrorInternalServerError)?;
//!     Ok(HttpResponse::Created()
//!         .insert_header(("Location", format!("/orders/{id}")))
//!         .json(serde_json::json!({ "id": id, "item": body.item })))
//! }
//!
//! #[actix_web::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let pool = sqlx::PgPool::connect("postgres://localhost/shop").await?;
//!     idem::migrate(&pool).await?;
//!     let idem = idem::Idem::new(pool);
//!     HttpServer::new(move || App::new().app_data(idem.clone()).service(create_order))
//!         .bind("127.0.0.1:8080")?
//!         .run()
//!         .await?;
//!     Ok(())
//! }
//! ```
//!
//! # The protocol
//!
//! | request | answer |
//! |---|---|
//! | first request with a key | the handler runs; its response is stored and returned |
//! | same key, same request, completed | the stored status, headers and exact body bytes, plus `Idempotent-Replayed: true` |
//! | same key while the first is still running | 409 with `Retry-After: 1` |
//! | same key, different method, path or body | 422 ([`problem`] says which differs) |
//! | no key | 400 |
//! | handler returns 5xx, panics, or the database fails | everything is rolled back; the key can be retried |
//!
//! Every answer idem gives itself is an RFC 9457 `application/problem+json` body with a
//! stable `type`; see [`problem`].
//!
//! # The key contract
//!
//! - `Idempotency-Key`: 1 to 255 visible ASCII characters, bare or as a Structured Field
//!   string (`"..."`); both forms are the same key. One key per logical operation, reused
//!   on every retry of it.
//! - Keys are scoped by the parameter named in `scope = ..`, whose type implements
//!   [`ScopeKey`]: one caller's key never matches, blocks or reveals another's.
//! - The fingerprint covers what the handler's extractors read: the method, the path, the
//!   query's parameters (decoded, in name order) and the body decoded from its
//!   `Content-Encoding`; JSON bodies are canonicalized (member order, whitespace and the
//!   spelling of a number do not count, its exact value does) and form fields are
//!   compared like the query. [`Fingerprint`] says exactly how.
//! - Keys live for the handler's `retention` (24 hours at least, the default).
//!
//! # Writing through the transaction
//!
//! A parameter of type [`Tx`] receives the transaction that holds the key row. Queries
//! run on `&mut *tx`; a helper taking `&mut sqlx::PgConnection` accepts `&mut tx`.
//! The type names the database: `idem::Tx<'_, sqlx::Postgres>` is PostgreSQL,
//! `idem::Tx<'_, sqlx::Sqlite>` SQLite, and the [`Idem`] registered with the app must be
//! built on a pool of the same database. On SQLite, writers take turns: each request's
//! transaction is `BEGIN IMMEDIATE`, and one that cannot get the write lock within
//! [`Idem::claim_wait`] is answered 409 with `Retry-After: 1`.
//! Passing `&mut tx` straight to `fetch_one` does not compile: `Tx` is not itself an
//! sqlx executor, the connection it dereferences to is.
//!
//! # Choosing the database
//!
//! A bare `idem::Tx` (likewise `Phases`, `Idem`, `Relay`, `Expiry`) means the one
//! database feature that is enabled: with only `sqlite` on, `idem::Tx` is SQLite. With
//! both `postgres` and `sqlite` on (the default features), a bare name does not compile;
//! write `idem::Tx<'_, sqlx::Postgres>` or `idem::Tx<'_, sqlx::Sqlite>`. Features are
//! unified across the dependency graph, so if a bare name picked one of two, a crate
//! that turns on `idem/postgres` somewhere in a SQLite application would silently make
//! its `Tx` PostgreSQL, found only when requests fail. A handler with no `Tx` or
//! `Phases` names its database with `backend = sqlx::Sqlite` in the attribute when both
//! are on. Functions that take a pool (`idem::migrate`, the `admin` views, `Idem::new`)
//! take the database from the pool's type.
//!
//! # Choosing a mechanism
//!
//! A key table is the tool for when nothing simpler fits. Pick the first row that
//! matches the operation:
//!
//! | the operation | what makes it idempotent | idem's part |
//! |---|---|---|
//! | the client can name the resource (it generates the order's id) | `PUT /orders/{id}` or a unique constraint on the id; a repeat finds the row | nothing to add; in an `#[idempotent]` handler, write the row with `INSERT .. ON CONFLICT (id) DO NOTHING RETURNING ..` on `&mut *tx` and, when it returns no row, `SELECT` the existing one and answer with it (see [natural keys](#natural-keys-inside-idems-transaction)) |
//! | the business already has a unique fact (invoice number, provider's event id) | a unique constraint on it; on conflict, answer with the existing record | the same: `ON CONFLICT DO NOTHING`, then read and answer the existing record, in idem's [`Tx`]; a plain `INSERT` that hits the constraint aborts the transaction on PostgreSQL |
//! | a `POST` that creates or charges, and the client cannot name the result | an `Idempotency-Key` and a stored response | `#[idempotent]` with a [`Tx`] parameter |
//! | several steps, some of them calls to other services | a key, a recovery point per step, and a key derived for each provider | `#[idempotent(lease = ..)]` with [`Phases`] and [`Phases::derived_key`] |
//! | receiving webhooks | the event's id as the key, scoped by the verified sender | `#[idempotent(key = header("webhook-id"))]` (or `key = json("id")`) with [`SignedWebhook`] as the scope: a redelivery gets the stored answer |
//! | consuming queue messages | a dedupe row per message id, in the consumer's transaction | [`Inbox::receive`] in the consumer's transaction, then commit, then acknowledge; the [`Relay`] delivers idem's own outbox, deduplicated by [`Message::id`] |
//!
//! ## Natural keys inside idem's transaction
//!
//! When the request carries a unique fact, the constraint decides, and the handler
//! answers a repeat with what is already there. Write it so that the conflict does not
//! fail the statement: on PostgreSQL a failed statement aborts idem's transaction, and a
//! 2xx after it is refused (`transaction-aborted`).
//!
//! ```no_run
//! # use actix_web::{HttpResponse, web};
//! # async fn f(tx: &mut idem::Tx<'_, sqlx::Postgres>, number: &str, amount: i64) -> Result<HttpResponse, sqlx::Error> {
//! let inserted: Option<i64> = sqlx::query_scalar(
//!     "INSERT INTO invoices (number, amount) VALUES ($1, $2)
//!      ON CONFLICT (number) DO NOTHING RETURNING id",
//! )
//! .bind(number)
//! .bind(amount)
//! .fetch_optional(&mut **tx)
//! .await?;
//! Ok(match inserted {
//!     Some(id) => HttpResponse::Created().json(serde_json::json!({ "id": id })),
//!     None => {
//!         // The invoice exists: answer with it (a different amount is the caller's error).
//!         let (id, stored): (i64, i64) =
//!             sqlx::query_as("SELECT id, amount FROM invoices WHERE number = $1")
//!                 .bind(number)
//!                 .fetch_one(&mut **tx)
//!                 .await?;
//!         if stored == amount {
//!             HttpResponse::Ok().json(serde_json::json!({ "id": id }))
//!         } else {
//!             HttpResponse::Conflict().finish()
//!         }
//!     }
//! })
//! # }
//! ```
//!
//! ## Webhooks
//!
//! A sender that retries (payment providers do, for days) names each event by an id: in
//! a header (`webhook-id` in Standard Webhooks, `X-GitHub-Delivery`) or in the body
//! (Stripe's `id`). `key = header("..")` or `key = json("..")` makes that id the key, in
//! place of `Idempotency-Key`; the scope is the sender, from an extractor that verifies
//! the delivery's signature, so an unverified delivery is refused before anything is
//! stored. [`SignedWebhook`] is that extractor for Standard Webhooks signatures, with a
//! [`WebhookVerifier`] in the app data. A redelivery of a processed event gets the stored
//! answer without running the handler; a concurrent one waits or gets 409, which the
//! sender retries; the same id with a different body is a 422, logged as an error. Keep
//! the retention longer than the sender retries.
//!
//! ```no_run
//! use actix_web::{App, HttpResponse, HttpServer, post, web};
//! use idem::idempotent;
//!
//! #[post("/webhooks/provider")]
//! #[idempotent(scope = sender, key = header("webhook-id"), retention = "5d")]
//! async fn provider_event(
//!     sender: idem::SignedWebhook,
//!     tx: idem::Tx<'_, sqlx::Postgres>,
//!     event: web::Json<serde_json::Value>,
//! ) -> actix_web::Result<HttpResponse> {
//!     sqlx::query("INSERT INTO charge_events (event_id, body) VALUES ($1, $2)")
//!         .bind(sender.id())
//!         .bind(event.to_string())
//!         .execute(&mut *tx)
//!         .await
//!         .map_err(actix_web::error::ErrorInternalServerError)?;
//!     Ok(HttpResponse::Ok().finish())
//! }
//!
//! #[actix_web::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let pool = sqlx::PgPool::connect("postgres://localhost/shop").await?;
//!     idem::migrate(&pool).await?;
//!     let idem = idem::Idem::new(pool);
//!     let verifier = idem::WebhookVerifier::new("provider", &std::env::var("WEBHOOK_SECRET")?)?;
//!     HttpServer::new(move || {
//!         App::new()
//!             .app_data(idem.clone())
//!             .app_data(verifier.clone())
//!             .service(provider_event)
//!     })
//!     .bind("127.0.0.1:8080")?
//!     .run()
//!     .await?;
//!     Ok(())
//! }
//! ```
//!
//! ## Queue consumers
//!
//! A broker delivers at least once: a consumer that dies after its effects and before its
//! acknowledgement gets the message again. [`Inbox::receive`] writes a row for the
//! message in the consumer's own transaction, with its effects: a redelivery finds it
//! ([`Delivery::Duplicate`]: commit and acknowledge, no effect), and a crash before the
//! commit leaves none (the redelivery is processed). Entries expire after the inbox's
//! retention, swept by the [`Expiry`] task. See [`Inbox`] for the loop.
//!
//! # Attribute arguments
//!
//! | argument | required | meaning |
//! |---|---|---|
//! | `scope = <parameter>` | yes | the handler parameter that identifies the caller; its type implements [`ScopeKey`] |
//! | `retention = "<duration>"` | no (`"24h"`) | how long keys are kept and replayed (`"36h"`, `"7d"`); at least 24 hours, at most `"100000y"` |
//! | `lease = "<duration>"` | with a [`Phases`] parameter, and only then | how long an attempt holds the key before a retry may take it over (`"30s"`); at least 1 s, at most the retention |
//! | `crate = <path>` | no (`::idem`) | the path the generated code reaches idem by: a renamed dependency (`crate = keys`) or a re-export (`crate = platform::keys`) |
//! | `key = header("<name>")` or `key = json("<field>")` | no (the `Idempotency-Key` header) | where the key is instead: a request header, or a field of the JSON body (a member's name, or a JSON Pointer such as `"/data/id"`), a string or an integer; for webhook receivers |
//! | `backend = <type>` | for a handler with no `Tx` or `Phases` parameter, when both database features are on (refused beside one) | the database whose [`Idem`] the handler uses, e.g. `backend = sqlx::Sqlite` |
//!
//! Every mistake is a compile error at the token to change: an unknown argument, a
//! scope that names no parameter, a retention under 24 hours or over `"100000y"` (the
//! expiry time must fit in the databases' timestamps), a lease without phases, both a
//! `Tx` and a `Phases` parameter, a bare `Tx` or `Phases` (or a handler with neither
//! and no `backend`) while both databases are enabled, a second `#[idempotent]`, and a route attribute below
//! `#[idempotent]` for a safe method (`GET`, `HEAD`, `OPTIONS`, `TRACE`, `QUERY`),
//! alone or among the methods of one handler.
//!
//! A mutating handler that is safe to repeat without a key (a PUT by a client-chosen id,
//! an upsert on a natural key) is marked [`exempt`] with its reason instead, and
//! [`registry::report`] lists every endpoint the running service knows, idempotent or
//! exempt, as the per-endpoint [`report`].
//!
//! # Moving from a hand-written implementation
//!
//! A service that already claims keys by hand (an `INSERT .. ON CONFLICT` into its own
//! table, then the business write, then an `UPDATE` with the response) moves in four
//! steps:
//!
//! 1. Call [`migrate`] at startup; idem's tables live beside yours, and its history in
//!    [`MIGRATIONS_TABLE`], never in `_sqlx_migrations`.
//! 2. Replace the handler's claim, replay and record code with `#[idempotent(scope =
//!    ..)]`, and its `pool.begin()` with a `tx: idem::Tx` parameter. Business statements
//!    stay as they are, run on `&mut *tx`.
//! 3. Keep the old table readable for one retention period: a retry of a request the old
//!    code completed carries a key idem has not seen, and would run again. Either look
//!    the key up in the old table first during that window (answering its stored
//!    response), or switch over at a quiet moment and accept that risk for requests in
//!    flight.
//! 4. Drop the old table and its expiry job once the retention has passed; start
//!    [`Expiry`] for idem's.
//!
//! What changes for clients: answers idem gives itself are `application/problem+json`
//! with the `type` URIs of [`problem`], a replay carries `Idempotent-Replayed: true`, and
//! a key reused with another body is a 422 rather than a replay of the old answer.

//!
//! # The phased form
//!
//! A handler that calls other services runs named phases through [`Phases`], each in a
//! transaction of its own; the claim commits first with a `lease`. After a crash, the
//! client's retry takes over once the lease runs out: committed phases return their
//! recorded outputs without running again. [`Phases::derived_key`] gives the key to send
//! to a provider, [`Tx::enqueue`] writes an outbox message in the phase's transaction and
//! [`Relay`] delivers it at least once.
//!
//! ```no_run
//! use actix_web::{HttpResponse, error::ErrorInternalServerError, post, web};
//! use idem::idempotent;
//!
//! #[post("/payments")]
//! #[idempotent(scope = account, retention = "24h", lease = "30s")]
//! async fn create_payment(
//!     account: web::ReqData<i64>,
//!     phases: idem::Phases<sqlx::Postgres>,
//! ) -> actix_web::Result<HttpResponse> {
//!     let id: i64 = phases
//!         .run("payment_created", async |mut tx| {
//!             sqlx::query_scalar("INSERT INTO payments (account_id) VALUES ($1) RETURNING id")
//!                 .bind(*account)
//!                 .fetch_one(&mut *tx)
//!                 .await
//!                 .map_err(ErrorInternalServerError)
//!         })
//!         .await?;
//!     let provider_key = phases.derived_key("charge");
//!     phases
//!         .run("charged", async |mut tx| {
//!             // Call the provider with `provider_key` here, then record the charge.
//!             tx.enqueue("receipts", &serde_json::json!({ "payment": id, "key": provider_key }))
//!                 .await
//!                 .map_err(ErrorInternalServerError)
//!         })
//!         .await?;
//!     Ok(HttpResponse::Created().json(serde_json::json!({ "id": id })))
//! }
//! ```

//!
//! # Optional features
//!
//! | feature | adds |
//! |---|---|
//! | `metrics` | `idem::metrics`: requests by outcome and endpoint, takeovers and the time spent in idem's statements, through the `metrics` facade |
//! | `openapi` | `idem::openapi::IdempotencyDocs`: a utoipa modifier that documents the key header, the retention policy, the replay header and the problem responses of every idempotent operation |
//! | `encryption` | `idem::encryption::Keyring` and `Idem::encrypt_with`: stored responses encrypted at rest, with key rotation |
//!
//! Callers written in Rust can use the `idem-client` crate, a reqwest middleware that
//! sends one key per logical request and retries it safely.

// The actix-web form only with its adapter: without the feature, `idem::idempotent` is
// not there to name (an unresolved import), rather than a macro whose output names a
// `__private::actix` that is not.
/// Marks a handler that mutates and is safe to repeat without a key, for the reason
/// given; the handler is left as written, and the registry lists it beside the
/// idempotent ones. For actix-web and axum handlers alike: written above an actix-web
/// route attribute, it records the route too.
///
/// ```
/// use actix_web::{HttpResponse, delete, put, web};
///
/// #[idem::exempt("PUT by client-chosen id: a repeat writes the same cart again")]
/// #[put("/carts/{id}")]
/// async fn put_cart(id: web::Path<i64>, body: web::Json<serde_json::Value>) -> HttpResponse {
///     // An upsert on the id the client chose.
///     let _ = (id, body);
///     HttpResponse::NoContent().finish()
/// }
///
/// // Below the route attribute it still works, but sees no route: the registry then
/// // names the handler by its path.
/// #[delete("/carts/{id}")]
/// #[idem::exempt("a repeated DELETE answers 404")]
/// async fn delete_cart(id: web::Path<i64>) -> HttpResponse {
///     let _ = id;
///     HttpResponse::NoContent().finish()
/// }
///
/// // An axum handler is a plain async fn.
/// #[idem::exempt("PUT by client-chosen id")]
/// async fn put_profile(axum::extract::Path(id): axum::extract::Path<i64>) -> String {
///     id.to_string()
/// }
///
/// # let _ = (put_cart, delete_cart, put_profile);
/// let exempt: Vec<_> = idem::registry::exemptions()
///     .iter()
///     .map(|exemption| (exemption.handler(), exemption.route()))
///     .collect();
/// assert!(exempt.contains(&("put_cart", Some(("PUT", "/carts/{id}")))));
/// assert!(exempt.contains(&("delete_cart", None)));
/// assert!(exempt.contains(&("put_profile", None)));
/// ```
pub use idem_macros::exempt;
#[cfg(feature = "actix")]
pub use idem_macros::idempotent;
/// The operator's side: the expiry sweep, the schema's status, the views of the key table
/// and the repair of unfinished keys.
pub use idem_runtime::admin;
/// The outbox: messages written with the handler's transaction, and the relay.
pub use idem_runtime::outbox;
/// The phased form: phases, the lease and their errors.
pub use idem_runtime::phased;
/// The problem responses idem answers with.
pub use idem_runtime::problem;
/// Every endpoint the running service knows, idempotent or exempt, and their report.
pub use idem_runtime::registry;
/// The per-endpoint idempotency report (`idem audit --format report`, `registry::report()`).
pub use idem_runtime::report;
/// The verification harness for the application's own tests (feature `testing`).
#[cfg(feature = "testing")]
pub use idem_runtime::testing;
pub use idem_runtime::{
    Backend, ChosenBackend, DefaultBackend, Fingerprint, Headers, IDEMPOTENCY_KEY,
    IDEMPOTENT_REPLAYED, Idem, IdempotencyKey, IntoHeaderName, IntoStatusCode, InvalidJson,
    KeyError, MAX_KEY_LEN, Phases, Policy, ScopeKey, Settings, TaskHandle, Tx, UnverifiedScope,
    migrate, policies,
};
/// Webhook receivers (the key from a header or the body, the sender verified) and the
/// consumer inbox for queue messages.
pub use idem_runtime::{
    Delivery, Inbox, KeySource, SecretError, SignatureError, SignedWebhook, WEBHOOK_ID,
    WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP, WebhookRejected, WebhookVerifier,
};

// The root names of the items now grouped in `admin`, `outbox` and `phased`, kept out of
// the documentation while callers move.
#[doc(hidden)]
pub use idem_runtime::admin::*;
#[doc(hidden)]
pub use idem_runtime::outbox::{Message, Relay, RelayHandle};
#[doc(hidden)]
pub use idem_runtime::phased::{Lease, MAX_PHASE_NAME_LEN, PhaseError, PhaseErrorKind};

#[cfg(feature = "encryption")]
pub use idem_runtime::encryption;
#[cfg(feature = "metrics")]
pub use idem_runtime::metrics;
#[cfg(feature = "openapi")]
pub use idem_runtime::openapi;
/// What a bare `Tx`, `Phases` or `Idem` would name with both databases enabled: none.
#[cfg(all(feature = "postgres", feature = "sqlite"))]
pub use idem_runtime::{BothBackendsEnabled, NameTheDatabase};

/// axum 0.8 handlers (feature `axum`).
///
/// `#[idem::axum::idempotent(..)]` takes the same arguments as [`idempotent`] and gives
/// an axum handler the same protocol: the key row claimed in the transaction of the
/// handler's writes ([`Tx`]), the fingerprint, the replay, the 400, 409, 413
/// and 422 problems. The attribute's path says which framework a handler is for, so one
/// project can have handlers of both.
///
/// The handler's parameters are axum extractors, but for `Tx` and `Phases`: the last one
/// may read the body (`Json`, `Form`, `String`, ...), the others the request's head. They
/// run on the buffered body, decoded from its `Content-Encoding`: exactly what is
/// fingerprinted. A rejection is answered before any key is claimed. The handler's name
/// is a value to route; idem is found in the request's extensions, where
/// `Router::layer(Extension(idem))` puts it:
///
/// ```no_run
/// use axum::routing::post;
/// use axum::{Extension, Json, Router};
/// use axum::http::{HeaderMap, StatusCode};
///
/// # #[derive(Clone)] struct Account(i64);
/// # impl idem::ScopeKey for Account {
/// #     fn scope_key(&self) -> std::borrow::Cow<'_, str> { self.0.to_string().into() }
/// # }
/// # impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Account {
/// #     type Rejection = StatusCode;
/// #     async fn from_request_parts(_: &mut axum::http::request::Parts, _: &S)
/// #         -> Result<Self, StatusCode> { Ok(Account(1)) }
/// # }
/// #[derive(serde::Deserialize)]
/// struct NewOrder {
///     item: String,
/// }
///
/// #[idem::axum::idempotent(scope = account, retention = "24h")]
/// async fn create_order(
///     account: Account,
///     tx: idem::Tx<'_, sqlx::Postgres>,
///     Json(order): Json<NewOrder>,
/// ) -> Result<(StatusCode, HeaderMap, String), StatusCode> {
///     let id: i64 = sqlx::query_scalar(
///         "INSERT INTO orders (account_id, item) VALUES ($1, $2) RETURNING id",
///     )
///     .bind(account.0)
///     .bind(&order.item)
///     .fetch_one(&mut *tx)
///     .await
///     .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
///     let mut headers = HeaderMap::new();
///     headers.insert("location", format!("/orders/{id}").parse().unwrap());
///     Ok((StatusCode::CREATED, headers, format!("order {id}")))
/// }
///
/// # async fn serve(pool: sqlx::PgPool) -> std::io::Result<()> {
/// let app = Router::new()
///     .route("/orders", post(create_order))
///     .layer(Extension(idem::Idem::new(pool)));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// axum::serve(listener, app).await
/// # }
/// ```
///
/// The generated handler accepts every router state its extractors accept, as axum's own
/// handlers do, so a parameter that is no extractor is reported where the handler is
/// routed, as axum's "`Handler` is not implemented". Name the router's state with
/// `state = AppState` (like axum's `#[debug_handler(state = AppState)]`) and the handler
/// is for that state alone: each parameter is checked against it, and a mistake is one
/// error at the parameter's type, naming the type, the state and the trait to implement.
/// Use it when the router's state is one type (a `State<AppState>` or a substate with
/// `FromRef<AppState>` extracts as usual); leave it out for a handler routed on routers
/// of different states:
///
/// ```
/// # use axum::extract::State;
/// # use axum::Extension;
/// #[derive(Clone)]
/// struct AppState {
///     currency: &'static str,
/// }
///
/// #[idem::axum::idempotent(scope = account, state = AppState, backend = sqlx::Postgres)]
/// async fn quote(State(app): State<AppState>, account: Extension<i64>) -> String {
///     format!("{} {}", account.0, app.currency)
/// }
/// ```
///
/// [`SignedWebhook`] is an axum extractor too, with the
/// `WebhookVerifier` in the extensions. Where a layer suits better than an attribute,
/// [`IdempotencyLayer`](crate::axum::IdempotencyLayer) runs the same protocol in front of a
/// plain handler that takes `Tx` as an extractor; the README's "axum: macro or layer" says
/// what each keeps.
#[cfg(feature = "axum")]
pub mod axum {
    pub use idem_macros::idempotent_axum as idempotent;
    pub use idem_runtime::{IdempotencyLayer, IdempotentService};

    // The marker of the `Handler` impl the attribute generates, here rather than only
    // under `__private` so that a compiler message about that impl (a handler routed on
    // a router whose state its extractors do not accept) names it by this path.
    #[doc(hidden)]
    pub use idem_runtime::__private::axum::Marker as Idempotent;
    // The traits a handler written with `state = ..` checks its extractors against, here
    // for the same reason: the message's notes then name them by these paths.
    #[doc(hidden)]
    pub use idem_runtime::__private::axum::{BodyExtractor, PartsExtractor};
}

// The trait a database named in `Tx<'_, DB>`, `Phases<DB>` or `backend = DB` is checked
// against, also here (hidden) so that the message about a type that is none names the
// trait by its name alone rather than by the `__private` path.
#[doc(hidden)]
pub use idem_runtime::__private::IdemDatabase;

/// Support for code generated by `#[idempotent]`; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use idem_runtime::__private::*;

    /// The actix-web group, re-exported item by item (not as the runtime's module) so
    /// that compiler errors name these paths rather than the runtime's private ones.
    #[cfg(feature = "actix")]
    pub mod actix {
        pub use idem_runtime::__private::actix::*;
    }

    /// The axum group, re-exported item by item (not as the runtime's module) so that
    /// compiler errors name these paths rather than the runtime's private ones.
    #[cfg(feature = "axum")]
    pub mod axum {
        pub use idem_runtime::__private::axum::*;
    }
}
