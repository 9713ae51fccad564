//! `POST /payments`, idem's phased form: a payment is created, charged at a payment
//! provider over HTTP and announced by a receipt, in three phases that each commit on
//! their own, so a crash between any two is resumed by the client's retry, exactly once.
//!
//! Here are the payment, its checks, the phases ([`pay`]), the receipts' relay and the
//! problem answers; the provider is in `provider.rs` and the SQL in `payment_store.rs`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::Pool;

use super::body::{JsonBody, fields};
use super::orders::{Account, integer};
use super::payment_store::PaymentStore;
use super::problem::Problem;
use super::provider::Provider;

/// The crash points `IDEM_EXAMPLE_CRASH_AFTER` accepts: the three phases, and the moment
/// inside `charged` after the provider answered and before the phase commits.
pub(crate) const CRASH_POINTS: [&str; 4] = [
    "payment_created",
    "provider_called",
    "charged",
    "receipt_queued",
];

/// The outbox topic of payment receipts.
pub(crate) const RECEIPTS_TOPIC: &str = "payment_receipts";

/// The largest payment, in cents.
const MAX_AMOUNT_CENTS: i64 = 100_000_000;

/// What `POST /payments` needs besides the database: where the provider is, and the
/// crash hook.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) provider: Provider,
    crash_after: Option<&'static str>,
    /// The provider's webhook signer: set, the provider announces each new charge with a
    /// signed `charge.succeeded` event to `POST /webhooks/provider`.
    pub(crate) webhooks: Option<idem::WebhookVerifier>,
}

impl Settings {
    /// `provider_base_url` is the server's own address, e.g. `http://127.0.0.1:8080`;
    /// `crash_after` one of [`CRASH_POINTS`].
    pub(crate) fn new(provider_base_url: String, crash_after: Option<&'static str>) -> Self {
        Self {
            provider: Provider::new(provider_base_url),
            crash_after,
            webhooks: None,
        }
    }

    /// The provider signs its webhook deliveries with `signer`'s secret.
    pub(crate) fn with_webhooks(self, signer: idem::WebhookVerifier) -> Self {
        Self {
            webhooks: Some(signer),
            ..self
        }
    }

    /// The test hook: with `IDEM_EXAMPLE_CRASH_AFTER` at this point, the process dies here
    /// as if the machine lost power: no destructors, no response, no lease released.
    fn crash_point(&self, point: &str) {
        if self.crash_after == Some(point) {
            eprintln!("orders: IDEM_EXAMPLE_CRASH_AFTER={point}: aborting");
            std::process::abort();
        }
    }
}

/// A payment as the API shows it; also each phase's recorded output.
#[derive(Debug, Serialize, Deserialize, sqlx::FromRow)]
pub(crate) struct Payment {
    pub(crate) id: i64,
    amount_cents: i64,
    currency: String,
    state: String,
    provider_charge_id: Option<String>,
    created_at: String,
}

/// The receipt message the last phase enqueues.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Receipt {
    pub(crate) payment_id: i64,
    pub(crate) amount_cents: i64,
    pub(crate) currency: String,
    provider_charge_id: String,
}

/// Creates and charges a payment, phase by phase; the handler answers 201 with it.
///
/// Each phase commits on its own. A crash after one of them leaves the key in progress
/// at that recovery point; once the lease (3 s) runs out, the client's retry takes over,
/// gets the committed phases' outputs without running them again, and goes on from
/// there. The provider is called with a key derived from the account, the client's key
/// and the step, so even a crash between the provider's answer and the end of the
/// `charged` phase charges once.
pub(crate) async fn pay<DB: PaymentStore>(
    account: Account,
    phases: &mut idem::Phases<DB>,
    payment: &NewPayment,
    settings: &Settings,
) -> Result<Payment, PaymentError> {
    let created: Payment = phases
        .run("payment_created", async |mut tx| {
            let created = DB::insert_payment(
                &mut tx,
                account.id(),
                payment.amount_cents,
                &payment.currency,
            )
            .await?;
            Ok::<_, PaymentError>(created)
        })
        .await?;
    settings.crash_point("payment_created");

    let provider_key = phases.derived_key("charge");
    let charged: Payment = phases
        .run("charged", async |mut tx| {
            let charge = settings
                .provider
                .charge(&provider_key, created.amount_cents, &created.currency)
                .await?;
            settings.crash_point("provider_called");
            let charged = DB::mark_charged(&mut tx, created.id, &charge.id).await?;
            Ok::<_, PaymentError>(charged)
        })
        .await?;
    settings.crash_point("charged");

    let paid: Payment = phases
        .run("receipt_queued", async |mut tx| {
            let receipt = Receipt {
                payment_id: charged.id,
                amount_cents: charged.amount_cents,
                currency: charged.currency.clone(),
                provider_charge_id: charged.provider_charge_id.clone().unwrap_or_default(),
            };
            tx.enqueue(RECEIPTS_TOPIC, &receipt).await?;
            let paid = DB::mark_succeeded(&mut tx, charged.id).await?;
            Ok::<_, PaymentError>(paid)
        })
        .await?;
    settings.crash_point("receipt_queued");
    Ok(paid)
}

/// One of the caller's payments with its current state; another account's payment, and
/// an id that is not a number, are as absent as a missing one.
pub(crate) async fn find_payment<DB: PaymentStore>(
    pool: &Pool<DB>,
    account: Account,
    id: &str,
) -> Result<Payment, PaymentError> {
    let Ok(id) = id.parse::<i64>() else {
        return Err(PaymentError::NotFound);
    };
    DB::get_payment(pool, id, account.id())
        .await?
        .ok_or(PaymentError::NotFound)
}

/// The body of `POST /payments`, checked while it is extracted (before idem claims the
/// key, so a rejected body leaves the key unused).
#[derive(Debug)]
pub(crate) struct NewPayment {
    amount_cents: i64,
    currency: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewPaymentFields {
    #[serde(deserialize_with = "integer")]
    amount_cents: i64,
    currency: String,
}

impl JsonBody for NewPayment {
    type Error = PaymentError;

    fn unsupported_media_type() -> PaymentError {
        PaymentError::UnsupportedMediaType
    }

    fn malformed(detail: String) -> PaymentError {
        PaymentError::MalformedBody(detail)
    }

    fn invalid(detail: String) -> PaymentError {
        PaymentError::InvalidPayment(detail)
    }

    fn parse(body: &[u8]) -> Result<Self, PaymentError> {
        let fields: NewPaymentFields = fields::<Self, _>(body)?;
        if !(1..=MAX_AMOUNT_CENTS).contains(&fields.amount_cents) {
            return Err(PaymentError::InvalidPayment(format!(
                "amount_cents must be from 1 to {MAX_AMOUNT_CENTS}, not {}",
                fields.amount_cents
            )));
        }
        if fields.currency.len() != 3 || !fields.currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(PaymentError::InvalidPayment(format!(
                "currency must be three capital letters (an ISO 4217 code such as EUR), not {:?}",
                fields.currency
            )));
        }
        Ok(Self {
            amount_cents: fields.amount_cents,
            currency: fields.currency,
        })
    }
}

/// Starts the relay that delivers receipts from idem's outbox into `receipts`. Delivery
/// is at least once; the message id deduplicates, and `deliveries` counts repeats.
pub(crate) fn spawn_relay<DB: PaymentStore>(pool: Pool<DB>) -> idem::outbox::RelayHandle {
    let sink = pool.clone();
    idem::outbox::Relay::new(pool)
        .poll_interval(Duration::from_millis(200))
        .spawn(move |message: idem::outbox::Message| {
            let sink = sink.clone();
            async move { deliver_receipt(&sink, &message).await }
        })
}

async fn deliver_receipt<DB: PaymentStore>(
    pool: &Pool<DB>,
    message: &idem::outbox::Message,
) -> Result<(), sqlx::Error> {
    if message.topic() != RECEIPTS_TOPIC {
        // Not ours: handled means "nothing to do", so it is not offered again.
        return Ok(());
    }
    let receipt: Receipt = message
        .payload_as()
        .map_err(|error| sqlx::Error::Decode(Box::new(error)))?;
    DB::record_receipt(pool, message.id(), &receipt).await
}

/// Everything the payment routes answer besides success.
#[derive(Debug)]
pub(crate) enum PaymentError {
    /// 400: the body is not JSON.
    MalformedBody(String),
    /// 415: the body is not sent as JSON.
    UnsupportedMediaType,
    /// 422: JSON, but not a valid payment.
    InvalidPayment(String),
    /// 404: no such payment for this account.
    NotFound,
    /// 502: the provider failed; the payment stays in progress for the client's retry.
    Provider(String),
    /// 400 (provider): no usable `Idempotency-Key`.
    ProviderKeyMissing,
    /// 422 (provider): the key was used for a different charge.
    ProviderKeyReused,
    /// 500: the database failed.
    Database(sqlx::Error),
    /// idem could not run or record a phase; idem answers for it (each binary sends idem's
    /// own problem through its framework).
    Phase(idem::phased::PhaseError),
}

impl PaymentError {
    fn slug(&self) -> &'static str {
        match self {
            Self::MalformedBody(_) => "malformed-body",
            Self::UnsupportedMediaType => "unsupported-media-type",
            Self::InvalidPayment(_) => "invalid-payment",
            Self::NotFound => "payment-not-found",
            Self::Provider(_) => "provider-failed",
            Self::ProviderKeyMissing => "provider-key-missing",
            Self::ProviderKeyReused => "provider-key-reused",
            Self::Database(_) | Self::Phase(_) => "internal-error",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Self::MalformedBody(_) => "Malformed request body",
            Self::UnsupportedMediaType => "Unsupported media type",
            Self::InvalidPayment(_) => "Invalid payment",
            Self::NotFound => "Payment not found",
            Self::Provider(_) => "Payment provider failed",
            Self::ProviderKeyMissing => "Idempotency-Key required",
            Self::ProviderKeyReused => "Idempotency-Key reused for a different charge",
            Self::Database(_) | Self::Phase(_) => "Internal error",
        }
    }

    fn detail(&self) -> String {
        match self {
            Self::MalformedBody(detail) | Self::InvalidPayment(detail) => detail.clone(),
            Self::UnsupportedMediaType => "send the payment as application/json".to_owned(),
            Self::NotFound => "there is no such payment in this account".to_owned(),
            Self::Provider(detail) => {
                format!("{detail}; the payment is kept in progress: retry with the same key")
            }
            Self::ProviderKeyMissing => {
                "send an Idempotency-Key header of 1 to 255 characters".to_owned()
            }
            Self::ProviderKeyReused => {
                "this Idempotency-Key charged a different amount or currency".to_owned()
            }
            // The database's message stays in the log, not in the response.
            Self::Database(_) | Self::Phase(_) => {
                "the request failed; retry it with the same key".to_owned()
            }
        }
    }

    /// The HTTP status of every kind but [`Phase`](Self::Phase), whose status is idem's.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Self::MalformedBody(_) | Self::ProviderKeyMissing => 400,
            Self::UnsupportedMediaType => 415,
            Self::InvalidPayment(_) | Self::ProviderKeyReused => 422,
            Self::NotFound => 404,
            Self::Provider(_) => 502,
            Self::Database(_) | Self::Phase(_) => 500,
        }
    }

    /// The answer to send, or the [`idem::phased::PhaseError`] whose own answer idem gives; the
    /// database's and the provider's failures are logged here.
    pub(crate) fn problem(&self) -> Result<Problem, &idem::phased::PhaseError> {
        match self {
            Self::Database(error) => tracing::error!(%error, "payments: database error"),
            Self::Provider(detail) => tracing::warn!(detail, "payments: provider failed"),
            Self::Phase(error) => return Err(error),
            _ => {}
        }
        Ok(Problem::new(
            self.status(),
            self.slug(),
            self.title(),
            &self.detail(),
        ))
    }
}

impl fmt::Display for PaymentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Database(error) => write!(f, "database error: {error}"),
            Self::Phase(error) => write!(f, "{error}"),
            other => f.write_str(&other.detail()),
        }
    }
}

impl From<sqlx::Error> for PaymentError {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(error)
    }
}

/// Lets `?` pass idem's phase failures up; idem replaces the response with its own.
impl From<idem::phased::PhaseError> for PaymentError {
    fn from(error: idem::phased::PhaseError) -> Self {
        Self::Phase(error)
    }
}
