//! Idempotency keys for actix-web and axum handlers, enforced by the database: PostgreSQL
//! (feature `postgres`), or SQLite compiled in (feature `sqlite`); both are on by default.
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
//! # The guide
//!
//! The [`guide`] has one page per topic; start with the [protocol](guide::protocol)
//! (what each request is answered, the key contract, the limits) and the
//! [attribute's arguments](guide::attributes). A handler that calls another service takes
//! the [phased form](guide::phased); a webhook receiver or a queue consumer is in
//! [webhooks](guide::webhooks); [databases](guide::databases) says how SQLite and
//! PostgreSQL differ; [adopting](guide::adopting) moves an existing service over, route
//! by route.
//!
//! # Features
//!
//! | feature | default | adds |
//! |---|---|---|
//! | `actix` | yes | actix-web 4 handlers: [`idempotent`] |
//! | `postgres`, `sqlite` | yes | the key store on each database ([`guide::databases`]) |
//! | `uuid` | yes | [`ScopeKey`] for `uuid::Uuid` |
//! | `axum` | no | axum 0.8 handlers: `idem::axum`, the attribute and the layer |
//! | `metrics` | no | `idem::metrics`: requests by outcome, takeovers and statement times, through the `metrics` facade |
//! | `openapi` | no | `idem::openapi::IdempotencyDocs`: the key header, the policy and idem's problems in a utoipa document |
//! | `encryption` | no | `idem::encryption::Keyring` and `Idem::encrypt_with`: stored responses encrypted at rest |
//! | `redis` | no | `store = redis` and `idem::redis`: the phased form's keys in Redis 7 or Valkey 8, only for effects that live outside the database ([keys in Redis](guide::phased#keys-in-redis)) |
//!
//! Callers written in Rust can use the `idem-client` crate, a reqwest middleware that
//! sends one key per logical request and retries it safely ([`guide::client`]).

pub mod guide;

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
/// Its arguments: [the guide's table](crate::guide::attributes).
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
/// The phased form's key store on Redis or Valkey, for effects outside the database.
#[cfg(feature = "redis")]
pub use idem_runtime::redis;
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

#[cfg(feature = "encryption")]
pub use idem_runtime::encryption;
#[cfg(feature = "metrics")]
pub use idem_runtime::metrics;
#[cfg(feature = "openapi")]
pub use idem_runtime::openapi;
/// What a bare `Tx`, `Phases` or `Idem` would name with both databases enabled: none.
#[cfg(all(feature = "postgres", feature = "sqlite"))]
pub use idem_runtime::{BothBackendsEnabled, NameTheDatabase};

/// axum 0.8 handlers (feature `axum`): `#[idem::axum::idempotent(..)]`, with the same
/// arguments as [`idempotent`], and [`IdempotencyLayer`](crate::axum::IdempotencyLayer), the
/// same protocol as a tower layer. The [guide's page](crate::guide::axum) shows both and
/// says what each keeps.
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
