//! The business write every scenario makes: the example's order insert
//! (`examples/orders/app.rs`, `create_order`), with its request and response types.
//!
//! Copied rather than imported because the example's items are private to it, and so
//! that `bare`, `hand` and `idem` share one definition: whatever the three differ by is
//! then idempotency alone. On both databases, like the example: the statement is the
//! same text, only the rendering of `created_at` and the migrations differ.

use std::future::{Ready, ready};

use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest, HttpResponse, dev};
use serde::{Deserialize, Serialize};
use sqlx::migrate::Migrator;
use sqlx::{Postgres, Sqlite};

/// The request body every scenario sends: the example's `NewOrder`.
pub(crate) const ORDER_BODY: &[u8] = br#"{"item":"tea","quantity":2,"amount_cents":1250}"#;

/// The header that names the caller, as in the example.
pub(crate) const ACCOUNT_HEADER: &str = "x-account-id";

/// The caller, from `X-Account-Id` (the example's extractor, minus its error bodies).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Account(pub(crate) i64);

impl FromRequest for Account {
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, actix_web::Error>>;

    fn from_request(req: &HttpRequest, _: &mut dev::Payload) -> Self::Future {
        ready(
            req.headers()
                .get(ACCOUNT_HEADER)
                .and_then(|value| value.to_str().ok())
                .and_then(|text| text.parse::<i64>().ok())
                .filter(|&id| id > 0)
                .map(Self)
                .ok_or_else(|| actix_web::error::ErrorUnauthorized("send X-Account-Id")),
        )
    }
}

impl idem::ScopeKey for Account {
    fn scope_key(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Owned(self.0.to_string())
    }
}

/// The example's `NewOrder`, with the same checks made while it is deserialized.
#[derive(Debug, Deserialize)]
#[serde(try_from = "NewOrderFields")]
pub(crate) struct NewOrder {
    item: String,
    quantity: i32,
    amount_cents: i64,
}

#[derive(Deserialize)]
struct NewOrderFields {
    item: String,
    quantity: i32,
    amount_cents: i64,
}

impl TryFrom<NewOrderFields> for NewOrder {
    type Error = String;

    fn try_from(fields: NewOrderFields) -> Result<Self, String> {
        if fields.quantity < 1 {
            return Err(format!(
                "quantity must be at least 1, not {}",
                fields.quantity
            ));
        }
        if fields.amount_cents < 0 {
            return Err(format!(
                "amount_cents must not be negative, not {}",
                fields.amount_cents
            ));
        }
        Ok(Self {
            item: fields.item,
            quantity: fields.quantity,
            amount_cents: fields.amount_cents,
        })
    }
}

/// The example's `Order`, rendered by the database so a row always has the same bytes.
/// `Deserialize` for the phased form, which records it as a phase's output.
#[derive(Debug, Serialize, Deserialize, sqlx::FromRow)]
pub(crate) struct Order {
    pub(crate) id: i64,
    item: String,
    quantity: i32,
    amount_cents: i64,
    created_at: String,
}

/// A database the scenarios run on: the example's table and its insert.
pub(crate) trait OrderStore: idem::Backend {
    /// The example's table, applied from the example's own migrations so the schema
    /// cannot drift from the handler it mirrors.
    fn migrator() -> &'static Migrator;

    /// The example's insert, statement for statement.
    fn insert_order(
        conn: &mut Self::Connection,
        account: Account,
        order: &NewOrder,
    ) -> impl Future<Output = sqlx::Result<Order>>;
}

/// Implements [`OrderStore`] for one database, as the example's `store!` does.
macro_rules! order_store {
    ($db:ty, $migrations:literal, $created_at:literal) => {
        impl OrderStore for $db {
            fn migrator() -> &'static Migrator {
                static MIGRATOR: Migrator = sqlx::migrate!($migrations);
                &MIGRATOR
            }

            async fn insert_order(
                conn: &mut Self::Connection,
                account: Account,
                order: &NewOrder,
            ) -> sqlx::Result<Order> {
                sqlx::query_as(concat!(
                    "INSERT INTO orders (account_id, item, quantity, amount_cents) \
                     VALUES ($1, $2, $3, $4) RETURNING id, item, quantity, amount_cents, ",
                    $created_at
                ))
                .bind(account.0)
                .bind(&order.item)
                .bind(order.quantity)
                .bind(order.amount_cents)
                .fetch_one(conn)
                .await
            }
        }
    };
}

order_store!(
    Postgres,
    "../examples/orders/migrations/postgres",
    "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS created_at"
);
// SQLite keeps `created_at` as the text it shows (the example's SQLite migration).
order_store!(Sqlite, "../examples/orders/migrations/sqlite", "created_at");

/// The example's answer: 201, `Location`, the order as JSON.
pub(crate) fn created(order: &Order) -> HttpResponse {
    HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/orders/{}", order.id)))
        .json(order)
}

/// The same answer with a body of `size` bytes instead of the order: the large-response
/// scenarios. Built per request, as a handler rendering a report or an export would.
pub(crate) fn created_big(order: &Order, size: usize) -> HttpResponse {
    let mut body = Vec::with_capacity(size);
    let json = serde_json::to_vec(order).expect("an order serializes");
    while body.len() + json.len() < size {
        body.extend_from_slice(&json);
        body.push(b'\n');
    }
    body.resize(size, b' ');
    HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/orders/{}", order.id)))
        .content_type("application/x-ndjson")
        .body(body)
}

/// A database error as a 500: every handler here answers it the same way.
pub(crate) fn internal(error: sqlx::Error) -> actix_web::Error {
    actix_web::error::ErrorInternalServerError(error)
}
