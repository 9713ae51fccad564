//! The orders' SQL, one [`Store`] implementation per database, the migrations, and what
//! `POST /orders` does once its request is checked.

use std::future::Future;

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::{Pool, Postgres, Sqlite};

use super::orders::{Account, CARD_LIMIT_CENTS, NewOrder, Order, TestHooks};
use super::problem::AppError;

/// Applies idem's migrations (its own history, `_idem_migrations`) and then the example's
/// (sqlx's default `_sqlx_migrations`). Either order works: the histories never meet.
pub(crate) async fn setup<DB: Store>(pool: &Pool<DB>) -> Result<(), MigrateError> {
    idem::migrate(pool).await?;
    DB::migrate_app(pool).await
}

/// The body of `POST /orders` in the request's transaction: the card check, the insert
/// and the test hooks. An `Err` is the problem to answer (a 402 is stored like a 201; a
/// 500 rolls the insert back).
pub(crate) async fn place_order<DB: Store>(
    conn: &mut DB::Connection,
    account: Account,
    order: &NewOrder,
    hooks: &TestHooks,
) -> Result<Order, AppError> {
    if order.amount_cents > CARD_LIMIT_CENTS {
        return Err(AppError::CardDeclined {
            amount_cents: order.amount_cents,
        });
    }
    let created = DB::insert_order(conn, account.id(), order).await?;
    hooks.after_insert().await?;
    Ok(created)
}

/// The example's SQL for one database: implemented for PostgreSQL and SQLite below. The
/// futures are `Send`, as axum requires of a handler's future.
pub(crate) trait Store: idem::Backend {
    /// The example's own migrations (`examples/orders/migrations/<backend>`).
    fn app_migrator() -> &'static Migrator;

    /// Applies [`app_migrator`](Self::app_migrator).
    fn migrate_app(pool: &Pool<Self>) -> impl Future<Output = Result<(), MigrateError>> + Send;

    /// Inserts an order in the request's transaction.
    fn insert_order(
        conn: &mut Self::Connection,
        account: i64,
        order: &NewOrder,
    ) -> impl Future<Output = sqlx::Result<Order>> + Send;

    /// The account's orders, oldest first.
    fn list_orders(
        pool: &Pool<Self>,
        account: i64,
    ) -> impl Future<Output = sqlx::Result<Vec<Order>>> + Send;

    /// One order of the account.
    fn get_order(
        pool: &Pool<Self>,
        id: i64,
        account: i64,
    ) -> impl Future<Output = sqlx::Result<Option<Order>>> + Send;
}
/// Implements [`Store`] for one database. The statements are the same text on both
/// (`$1`-style parameters work on SQLite too); only the migrations and the rendering of
/// `created_at` differ.
macro_rules! store {
    ($db:ty, $migrations:literal, $created_at:literal) => {
        impl Store for $db {
            fn app_migrator() -> &'static Migrator {
                static MIGRATOR: Migrator = sqlx::migrate!($migrations);
                &MIGRATOR
            }

            async fn migrate_app(pool: &Pool<Self>) -> Result<(), MigrateError> {
                Self::app_migrator().run(pool).await
            }

            async fn insert_order(
                conn: &mut Self::Connection,
                account: i64,
                order: &NewOrder,
            ) -> sqlx::Result<Order> {
                sqlx::query_as(concat!(
                    "INSERT INTO orders (account_id, item, quantity, amount_cents) \
                     VALUES ($1, $2, $3, $4) RETURNING id, item, quantity, amount_cents, ",
                    $created_at
                ))
                .bind(account)
                .bind(&order.item)
                .bind(order.quantity)
                .bind(order.amount_cents)
                .fetch_one(conn)
                .await
            }

            async fn list_orders(pool: &Pool<Self>, account: i64) -> sqlx::Result<Vec<Order>> {
                sqlx::query_as(concat!(
                    "SELECT id, item, quantity, amount_cents, ",
                    $created_at,
                    " FROM orders WHERE account_id = $1 ORDER BY id"
                ))
                .bind(account)
                .fetch_all(pool)
                .await
            }

            async fn get_order(
                pool: &Pool<Self>,
                id: i64,
                account: i64,
            ) -> sqlx::Result<Option<Order>> {
                sqlx::query_as(concat!(
                    "SELECT id, item, quantity, amount_cents, ",
                    $created_at,
                    " FROM orders WHERE id = $1 AND account_id = $2"
                ))
                .bind(id)
                .bind(account)
                .fetch_optional(pool)
                .await
            }
        }
    };
}

store!(
    Postgres,
    "examples/orders/migrations/postgres",
    "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS created_at"
);
// SQLite keeps `created_at` as the text it shows (see the SQLite migration).
store!(Sqlite, "examples/orders/migrations/sqlite", "created_at");
