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
//! // Keys are scoped by the account in the path: one account's key never touches another's.
//! #[post("/accounts/{account}/orders")]
//! #[idempotent(scope = account, retention = "24h")]
//! async fn create_order(
//!     account: web::Path<i64>,
//!     tx: idem::Tx,
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
//!         .insert_header(("Location", format!("/accounts/{account}/orders/{id}")))
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
//! - The fingerprint covers the method, the path with its query, and the body; JSON bodies
//!   are canonicalized, so key order and whitespace do not count as a change.
//! - Keys live for the handler's `retention` (24 hours at least, the default).
//!
//! # Writing through the transaction
//!
//! A parameter of type [`Tx`] receives the transaction that holds the key row. Queries
//! run on `&mut *tx`; a helper taking `&mut sqlx::PgConnection` accepts `&mut tx`.
//! The type names the database: `idem::Tx` is PostgreSQL (the [`DefaultBackend`]),
//! `idem::Tx<'_, sqlx::Sqlite>` SQLite, and the [`Idem`] registered with the app must be
//! built on a pool of the same database. On SQLite, writers take turns: each request's
//! transaction is `BEGIN IMMEDIATE`, and one that cannot get the write lock within
//! [`Idem::claim_wait`] is answered 409 with `Retry-After: 1`.
//! Passing `&mut tx` straight to `fetch_one` does not compile: `Tx` is not itself an
//! sqlx executor, the connection it dereferences to is.

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
//! #[post("/accounts/{account}/payments")]
//! #[idempotent(scope = account, retention = "24h", lease = "30s")]
//! async fn create_payment(
//!     account: web::Path<i64>,
//!     phases: idem::Phases,
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

pub use idem_macros::idempotent;
pub use idem_runtime::{
    AgeCounts, BODY_PREVIEW_BYTES, Expiry, ExpiryHandle, ExpiryStats, InProgressKey, IndexSize,
    KeyRecord, KeyStats, SchemaStatus, StateCount, SweepError, SweepReport, inspect_key, key_stats,
    schema_status,
};
pub use idem_runtime::{
    Backend, DefaultBackend, Fingerprint, IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, Idem,
    IdempotencyKey, InvalidJson, KeyError, MAX_KEY_LEN, MIGRATIONS_TABLE, Policy, ScopeKey, Tx,
    migrate, policies, problem,
};
pub use idem_runtime::{
    Lease, MAX_PHASE_NAME_LEN, Message, PhaseError, PhaseErrorKind, Phases, Relay, RelayHandle,
};

/// Support for code generated by `#[idempotent]`; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use idem_runtime::__private::*;
}
