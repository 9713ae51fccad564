//! An orders service whose `POST /orders` is idempotent with idem, and whose
//! `POST /payments` uses idem's phased form around a payment provider.
//!
//! ```text
//! cargo run --example orders                                                # SQLite
//! DATABASE_URL=postgres://localhost/orders cargo run --example orders      # PostgreSQL
//! cargo run --example orders-axum                                 # the same on axum
//! ```
//!
//! This binary serves it with actix-web; `examples/orders-axum` serves the same contract
//! with axum, from the same `domain/` files.
//!
//! Environment: `DATABASE_URL`, `BIND_ADDR` (default `127.0.0.1:8080`) and `REDIS_URL`
//! (optional: `POST /notifications`). The database
//! decides the backend: a `postgres://` (or `postgresql://`) URL uses PostgreSQL; a
//! `sqlite://` URL, or none, uses a SQLite file (by default `orders.db` in the current
//! directory, created if missing). At startup it prints `orders: database <backend>
//! <location>`, applies idem's migrations (history in `_idem_migrations`) and its own from
//! `examples/orders/migrations/<backend>` (history in sqlx's default `_sqlx_migrations`),
//! starts the outbox relay that delivers payment receipts and idem's expiry task (a sweep
//! of expired keys every minute), prints
//! `orders: serving on http://<addr>` and serves. The endpoints and their answers are the
//! same on both.
//!
//! # API
//!
//! Every request names its caller with `X-Account-Id: <positive 64-bit integer>`;
//! without a usable one the answer is 401 `unauthenticated` (on `POST /orders` too:
//! idem checks the `Idempotency-Key` header after the handler's extractors).
//!
//! | request | answer |
//! |---|---|
//! | `POST /orders` with `Idempotency-Key` and `{"item": string, "quantity": int, "amount_cents": int}` | 201, the order as JSON (`id`, `item`, `quantity`, `amount_cents`, `created_at`), `Location: /orders/{id}` |
//! | the same with `amount_cents` over 1000000 | 402 `card-declined`; no order is created, and the answer is stored and replayed like a 201 |
//! | the same key again, same request | the stored answer byte for byte, plus `Idempotent-Replayed: true` |
//! | `GET /orders` | 200, the caller's orders as a JSON array, oldest first |
//! | `GET /orders/{id}` | 200 with the order, or 404 `order-not-found` (also for another account's order) |
//! | `GET /openapi.json` | 200, the OpenAPI document of the orders and payments endpoints, with what idem adds to the idempotent ones (key header, retention, replay header, problems); CI runs schemathesis against it |
//! | `GET /metrics` | 200, idem's metrics (`idem_requests_total`, `idem_takeovers_total`, `idem_statement_duration_seconds`) in Prometheus text format; no `X-Account-Id` needed |
//! | `GET /health` (no account needed) | 200 `{"status":"ok"}` while the database answers, else 503 `database-unavailable` |
//!
//! A method a path does not serve (`PUT /orders`) is 405 `method-not-allowed` with `Allow`
//! listing the ones it does; a path that does not exist is a 404.
//!
//! The key contract and idem's own answers (400 missing or invalid key, 409 in progress,
//! 422 key reused) are those of the idem crate.
//!
//! Checks done while the request is read, before idem claims the key (so the key stays
//! unused and can be sent again with a corrected request):
//! - a body that is not JSON: 400 `malformed-body`; not sent as `application/json`: 415
//!   `unsupported-media-type`;
//! - JSON that is not a valid order (a missing or mistyped field, `quantity` below 1,
//!   `amount_cents` below 0): 422 `invalid-order`; integers may be written `2.0`, as JSON
//!   Schema's `integer` allows;
//! - an unknown or out-of-range query parameter: 400 `invalid-query`.
//!
//! Database errors are 500 `internal-error`, which idem rolls back. A request waits at
//! most 5 s for a database connection; with the database down, idem answers 503
//! `storage-unavailable` by then. At startup the database has 5 s to accept a connection,
//! else the process exits with `orders: cannot connect to DATABASE_URL ..` and status 1.
//!
//! Errors are `application/problem+json` whose `type` is
//! `https://github.com/idem-rs/idem/blob/main/examples/orders/README.md#<slug>`.
//!
//! # Test hooks
//!
//! `POST /orders` accepts query parameters that exist only so tests can drive idem's
//! failure paths; a real service would not have them. Being part of the path, they are
//! part of the request's fingerprint.
//! - `?delay_ms=N` (0 to 5000) sleeps after the insert, inside the transaction, so a
//!   request can be held in flight.
//! - `?fail=500` answers 500 `simulated-failure` after the insert; idem rolls the insert
//!   and the key back.
//! - `?fail=panic` panics after the insert; idem answers 500 `handler-panicked` and rolls
//!   back.
//!
//! # Payments (the phased form)
//!
//! | request | answer |
//! |---|---|
//! | `POST /payments` with `Idempotency-Key` and `{"amount_cents": int, "currency": string}` | 201, the payment as JSON (`id`, `amount_cents`, `currency`, `state`, `provider_charge_id`, `created_at`), `Location: /payments/{id}` |
//! | the same key again, same request | the stored answer byte for byte, plus `Idempotent-Replayed: true` |
//! | the same key while an attempt holds its 3 s lease | 409 `request-in-progress`, `Retry-After: 1` |
//! | `GET /payments/{id}` | 200 with the payment and its `state`, or 404 `payment-not-found` |
//! | `POST /provider/charges` with `Idempotency-Key` and `{"amount_cents", "currency"}` | the example's payment provider: 201 with a new charge, 200 with the same charge for a repeated key, 422 `provider-key-reused` for a repeated key with other values |
//!
//! `POST /payments` runs three phases, each committing on its own: `payment_created`
//! (inserts the payment, state `created`), `charged` (calls the provider at the server's
//! own address with a key idem derives from the account, the client's key and the step,
//! then records the charge, state `charged`) and `receipt_queued` (writes a receipt into
//! idem's outbox, state `succeeded`). The relay delivers receipts into the `receipts`
//! table, deduplicated by message id. `amount_cents` is 1 to 100000000 and `currency`
//! three capital letters, else 422 `invalid-payment` before the key is claimed. A
//! provider failure is 502 `provider-failed`: the phases done so far are kept and a retry
//! with the same key resumes.
//!
//! # Notifications (keys in Redis)
//!
//! With `REDIS_URL` set, `POST /notifications` with `Idempotency-Key` and
//! `{"to": string, "text": string}` sends through the example's notification provider and
//! answers 201 with the message (`id`, `account_id`, `to`, `text`); the same key again is
//! the stored answer plus `Idempotent-Replayed: true`, and the provider is not called again
//! (`notifications.rs`, `domain/notifications.rs`; README.md says when Redis is the right
//! store). Without `REDIS_URL` the path is a 404 and is not in the OpenAPI document.
//!
//! Test hook: with `IDEM_EXAMPLE_CRASH_AFTER=<point>` the process aborts (no cleanup, like
//! a power cut) right after the phase `payment_created`, `charged` or `receipt_queued`
//! commits, or at `provider_called`: inside `charged`, after the provider answered and
//! before the phase commits. Any other value is refused at startup.

mod app;
mod observability;
mod openapi;
mod payments;
mod webhooks;

use std::process::ExitCode;

use actix_web::{App, HttpServer};

use app::domain::payment_store::PaymentStore;
use app::domain::startup::{Server, Service};
use app::domain::webhooks::WebhookStore;

#[actix_web::main]
async fn main() -> ExitCode {
    app::domain::startup::main::<Actix>().await
}

/// actix-web's server, with every route of the service.
struct Actix;

impl<DB: PaymentStore + WebhookStore> Server<DB> for Actix {
    async fn serve(service: Service<DB>) -> std::io::Result<()> {
        let Service {
            idem,
            notifications,
            listener,
            settings,
            verifier,
            metrics,
        } = service;
        HttpServer::new(move || {
            App::new()
                .configure(|cfg| app::configure(cfg, &idem))
                .configure(|cfg| app::notifications::configure(cfg, notifications.as_ref()))
                .configure(|cfg| payments::configure::<DB>(cfg, settings.clone()))
                .configure(|cfg| webhooks::configure::<DB>(cfg, verifier.clone()))
                .configure(|cfg| observability::configure(cfg, &metrics))
        })
        .listen(listener)?
        .run()
        .await
    }
}
