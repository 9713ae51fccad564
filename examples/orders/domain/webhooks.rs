//! The payment provider's signed events, `POST /webhooks/provider`: what an event is, how
//! one is recorded, and the receiver's SQL.
//!
//! The provider signs every delivery the Standard Webhooks way (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature`: HMAC-SHA256 of id, timestamp and body) and
//! delivers again on any non-2xx answer and on a timeout, for days. The handler's key is
//! the `webhook-id` header and its scope the sender, which `idem::SignedWebhook` verifies
//! before anything is stored; so the first delivery of an event records it, a redelivery
//! gets the stored 200 without running the handler, and the same id with another body is
//! a 422 (logged as an error).

use std::future::Future;

use serde::{Deserialize, Serialize};
use sqlx::{Postgres, Sqlite};

use super::orders::TestHooks;
use super::problem::AppError;
use super::store::Store;

/// The provider's name: the scope of its events' ids.
pub(crate) const SENDER: &str = "provider";

/// The secret the example's provider signs with (`whsec_` and base64), unless
/// `PROVIDER_WEBHOOK_SECRET` gives another.
pub(crate) const DEFAULT_SECRET: &str = "whsec_aWRlbS1leGFtcGxlLXByb3ZpZGVyLXNlY3JldA==";

/// The path the provider delivers to.
pub(crate) const PATH: &str = "/webhooks/provider";

/// An event as the provider sends it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Event {
    /// The event's id; the same as its `webhook-id` header.
    pub(crate) id: String,
    /// `charge.succeeded`; other types are acknowledged and ignored.
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) data: ChargeData,
}

/// What a `charge.succeeded` event says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ChargeData {
    pub(crate) charge_id: String,
    pub(crate) amount_cents: i64,
    pub(crate) currency: String,
}

/// The answer to a delivery, stored and replayed to every redelivery.
#[derive(Debug, Serialize)]
pub(crate) struct Received {
    event_id: String,
    recorded: bool,
}

/// Records the event `webhook_id` delivered in the request's transaction: a
/// `charge.succeeded` is written, any other type acknowledged; a body whose id is not the
/// verified `webhook-id` is a 422.
pub(crate) async fn receive_event<DB: WebhookStore>(
    conn: &mut DB::Connection,
    webhook_id: &str,
    event: Event,
    hooks: &TestHooks,
) -> Result<Received, AppError> {
    if event.id != webhook_id {
        return Err(AppError::InvalidEvent(format!(
            "the body's id {:?} is not the webhook-id {:?}",
            event.id, webhook_id
        )));
    }
    let recorded = event.kind == "charge.succeeded";
    if recorded {
        DB::record_charge_event(conn, &event.id, &event.data).await?;
    }
    hooks.after_insert().await?;
    Ok(Received {
        event_id: event.id,
        recorded,
    })
}

/// The receiver's SQL, for both databases.
pub(crate) trait WebhookStore: Store {
    /// Records a charge event in the request's transaction.
    fn record_charge_event(
        conn: &mut Self::Connection,
        event_id: &str,
        charge: &ChargeData,
    ) -> impl Future<Output = sqlx::Result<()>> + Send;
}
macro_rules! webhook_store {
    ($db:ty) => {
        impl WebhookStore for $db {
            async fn record_charge_event(
                conn: &mut Self::Connection,
                event_id: &str,
                charge: &ChargeData,
            ) -> sqlx::Result<()> {
                sqlx::query(
                    "INSERT INTO charge_events (event_id, charge_id, amount_cents, currency) \
                     VALUES ($1, $2, $3, $4)",
                )
                .bind(event_id)
                .bind(&charge.charge_id)
                .bind(charge.amount_cents)
                .bind(&charge.currency)
                .execute(conn)
                .await?;
                Ok(())
            }
        }
    };
}

webhook_store!(Postgres);
webhook_store!(Sqlite);
