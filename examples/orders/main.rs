//! An orders service whose `POST /orders` is idempotent with idem.
//!
//! ```text
//! DATABASE_URL=postgres://localhost/orders cargo run --example orders
//! ```
//!
//! Environment: `DATABASE_URL` (required, a PostgreSQL URL) and `BIND_ADDR` (default
//! `127.0.0.1:8080`). At startup it applies idem's migrations (history in
//! `_idem_migrations`) and its own from `examples/orders/migrations` (history in sqlx's
//! default `_sqlx_migrations`), prints `orders: serving on http://<addr>` and serves.
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
//!
//! The key contract and idem's own answers (400 missing or invalid key, 409 in progress,
//! 422 key reused) are those of the idem crate.
//!
//! Checks done while the request is read, before idem claims the key (so the key stays
//! unused and can be sent again with a corrected request):
//! - a body that is not JSON: 400 `malformed-body`; not sent as `application/json`: 415
//!   `unsupported-media-type`;
//! - JSON that is not a valid order (a missing or mistyped field, `quantity` below 1,
//!   `amount_cents` below 0): 422 `invalid-order`;
//! - an unknown or out-of-range query parameter: 400 `invalid-query`.
//!
//! Database errors are 500 `internal-error`, which idem rolls back.
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

mod app;

use std::process::ExitCode;

use actix_web::{App, HttpServer};
use sqlx::postgres::PgPoolOptions;

#[actix_web::main]
async fn main() -> ExitCode {
    let Some(database_url) = std::env::var("DATABASE_URL")
        .ok()
        .filter(|url| !url.trim().is_empty())
    else {
        eprintln!(
            "orders: DATABASE_URL is not set; set it to a PostgreSQL URL, e.g. \
             DATABASE_URL=postgres://localhost/orders cargo run --example orders"
        );
        return ExitCode::FAILURE;
    };
    let bind_addr = std::env::var("BIND_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());

    let pool = match PgPoolOptions::new()
        .max_connections(20)
        .connect(&database_url)
        .await
    {
        Ok(pool) => pool,
        Err(error) => {
            eprintln!("orders: cannot connect to DATABASE_URL: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(error) = app::setup(&pool).await {
        eprintln!("orders: migrations failed: {error}");
        return ExitCode::FAILURE;
    }

    // What operators should know: which endpoints are idempotent and how long keys live.
    for policy in idem::policies() {
        let route = policy.route().map_or_else(
            || policy.handler().to_owned(),
            |(method, path)| format!("{method} {path}"),
        );
        println!(
            "orders: idempotent {route}: scope {}, retention {}s",
            policy.scope(),
            policy.retention().as_secs()
        );
    }
    let idem = idem::Idem::new(pool);
    let server = HttpServer::new(move || App::new().configure(|cfg| app::configure(cfg, &idem)));
    let server = match server.bind(&bind_addr) {
        Ok(server) => server,
        Err(error) => {
            eprintln!("orders: cannot listen on {bind_addr}: {error}");
            return ExitCode::FAILURE;
        }
    };
    for addr in server.addrs() {
        println!("orders: serving on http://{addr}");
    }
    match server.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("orders: server failed: {error}");
            ExitCode::FAILURE
        }
    }
}
