//! The payments' and the provider's SQL, one [`PaymentStore`] implementation per database.

use std::future::Future;

use sqlx::{Pool, Postgres, Sqlite};

use super::payments::{Payment, Receipt};
use super::store::Store;

/// The payments' SQL for one database: implemented for PostgreSQL and SQLite below.
/// `Send` futures: the relay awaits them on `tokio::spawn`, and axum requires its handlers'
/// futures to be `Send`.
pub(crate) trait PaymentStore: Store {
    /// Inserts a payment in state `created`.
    fn insert_payment(
        conn: &mut Self::Connection,
        account: i64,
        amount_cents: i64,
        currency: &str,
    ) -> impl Future<Output = sqlx::Result<Payment>> + Send;

    /// Records the provider's charge: state `charged`.
    fn mark_charged(
        conn: &mut Self::Connection,
        id: i64,
        charge_id: &str,
    ) -> impl Future<Output = sqlx::Result<Payment>> + Send;

    /// State `succeeded`.
    fn mark_succeeded(
        conn: &mut Self::Connection,
        id: i64,
    ) -> impl Future<Output = sqlx::Result<Payment>> + Send;

    /// One payment of the account.
    fn get_payment(
        pool: &Pool<Self>,
        id: i64,
        account: i64,
    ) -> impl Future<Output = sqlx::Result<Option<Payment>>> + Send;

    /// The provider's first charge for `key`; `None` when the key charged before. The
    /// unique constraint decides: of two calls with one key, one inserts and the other
    /// finds its row.
    fn insert_charge(
        pool: &Pool<Self>,
        key: &str,
        amount_cents: i64,
        currency: &str,
    ) -> impl Future<Output = sqlx::Result<Option<i64>>> + Send;

    /// Counts a repeated call with `key`; returns the charge's `(id, amount, currency)`.
    fn repeat_charge(
        pool: &Pool<Self>,
        key: &str,
    ) -> impl Future<Output = sqlx::Result<(i64, i64, String)>> + Send;

    /// Stores a delivered receipt once per message id, counting deliveries.
    fn record_receipt(
        pool: &Pool<Self>,
        message_id: &str,
        receipt: &Receipt,
    ) -> impl Future<Output = sqlx::Result<()>> + Send;
}

/// Implements [`PaymentStore`] for one database: the same statements, but for how
/// `created_at` is rendered and how a message id is written.
macro_rules! payment_store {
    ($db:ty, $created_at:literal, $message_id:literal) => {
        impl PaymentStore for $db {
            async fn insert_payment(
                conn: &mut Self::Connection,
                account: i64,
                amount_cents: i64,
                currency: &str,
            ) -> sqlx::Result<Payment> {
                sqlx::query_as(concat!(
                    "INSERT INTO payments (account_id, amount_cents, currency) \
                     VALUES ($1, $2, $3) RETURNING ",
                    "id, amount_cents, currency, state, provider_charge_id, ",
                    $created_at
                ))
                .bind(account)
                .bind(amount_cents)
                .bind(currency)
                .fetch_one(conn)
                .await
            }

            async fn mark_charged(
                conn: &mut Self::Connection,
                id: i64,
                charge_id: &str,
            ) -> sqlx::Result<Payment> {
                sqlx::query_as(concat!(
                    "UPDATE payments SET state = 'charged', provider_charge_id = $2 \
                     WHERE id = $1 RETURNING ",
                    "id, amount_cents, currency, state, provider_charge_id, ",
                    $created_at
                ))
                .bind(id)
                .bind(charge_id)
                .fetch_one(conn)
                .await
            }

            async fn mark_succeeded(conn: &mut Self::Connection, id: i64) -> sqlx::Result<Payment> {
                sqlx::query_as(concat!(
                    "UPDATE payments SET state = 'succeeded' WHERE id = $1 RETURNING ",
                    "id, amount_cents, currency, state, provider_charge_id, ",
                    $created_at
                ))
                .bind(id)
                .fetch_one(conn)
                .await
            }

            async fn get_payment(
                pool: &Pool<Self>,
                id: i64,
                account: i64,
            ) -> sqlx::Result<Option<Payment>> {
                sqlx::query_as(concat!(
                    "SELECT id, amount_cents, currency, state, provider_charge_id, ",
                    $created_at,
                    " FROM payments WHERE id = $1 AND account_id = $2"
                ))
                .bind(id)
                .bind(account)
                .fetch_optional(pool)
                .await
            }

            async fn insert_charge(
                pool: &Pool<Self>,
                key: &str,
                amount_cents: i64,
                currency: &str,
            ) -> sqlx::Result<Option<i64>> {
                sqlx::query_scalar(
                    "INSERT INTO provider_charges (provider_key, amount_cents, currency) \
                     VALUES ($1, $2, $3) ON CONFLICT (provider_key) DO NOTHING RETURNING id",
                )
                .bind(key)
                .bind(amount_cents)
                .bind(currency)
                .fetch_optional(pool)
                .await
            }

            async fn repeat_charge(
                pool: &Pool<Self>,
                key: &str,
            ) -> sqlx::Result<(i64, i64, String)> {
                sqlx::query_as(
                    "UPDATE provider_charges SET requests = requests + 1 \
                     WHERE provider_key = $1 RETURNING id, amount_cents, currency",
                )
                .bind(key)
                .fetch_one(pool)
                .await
            }

            async fn record_receipt(
                pool: &Pool<Self>,
                message_id: &str,
                receipt: &Receipt,
            ) -> sqlx::Result<()> {
                sqlx::query(concat!(
                    "INSERT INTO receipts (message_id, payment_id, amount_cents, currency) VALUES (",
                    $message_id,
                    ", $2, $3, $4) \
                     ON CONFLICT (message_id) DO UPDATE SET deliveries = receipts.deliveries + 1"
                ))
                .bind(message_id)
                .bind(receipt.payment_id)
                .bind(receipt.amount_cents)
                .bind(&receipt.currency)
                .execute(pool)
                .await?;
                Ok(())
            }
        }
    };
}

payment_store!(
    Postgres,
    "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS created_at",
    "$1::uuid"
);
payment_store!(Sqlite, "created_at", "$1");
