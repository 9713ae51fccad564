//! `POST /payments`: idem's phased form. A payment is created, charged at a payment
//! provider over HTTP and announced by a receipt, in three phases that each commit on
//! their own, so a crash between any two is resumed by the client's retry, exactly once.
//!
//! The provider is served by the example itself (`POST /provider/charges`) so the whole
//! story runs in one process; it deduplicates by a unique constraint on the key it is
//! called with, as real payment providers do with `Idempotency-Key`.
//!
//! Kept apart from `app.rs` (which the in-process tests include) because it needs the
//! server's own address and an outbox relay: the tests drive it through the real binary.
//!
//! Like the orders, the handlers are generic over the database; the SQL is in the
//! [`PaymentStore`] implementations at the end.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError, dev, web};
use serde::{Deserialize, Serialize};
use sqlx::{Pool, Postgres, Sqlite};

use crate::app::{Account, PROBLEM_BASE, Store, integer, resource};

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

/// How long the provider may take to answer before the charge phase gives up (502; the
/// client's retry charges again with the same provider key, so nothing is charged twice).
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

/// What `POST /payments` needs besides the database: where the provider is, and the
/// crash hook.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    provider: Provider,
    crash_after: Option<&'static str>,
    /// The provider's webhook signer: set, the provider announces each new charge with a
    /// signed `charge.succeeded` event to `POST /webhooks/provider`.
    webhooks: Option<idem::WebhookVerifier>,
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

/// Registers the payment routes, the provider's route and their settings (one
/// [`resource`] per path: another method is a 405).
pub(crate) fn configure<DB: PaymentStore>(cfg: &mut web::ServiceConfig, settings: Settings) {
    cfg.app_data(web::Data::new(settings))
        .service(resource(
            "/payments",
            [(Method::POST, web::to(create_payment::<DB>))],
        ))
        .service(resource(
            "/payments/{id}",
            [(Method::GET, web::to(get_payment::<DB>))],
        ))
        .service(resource(
            "/provider/charges",
            [(Method::POST, web::to(provider_charge::<DB>))],
        ));
}

/// A payment as the API shows it; also each phase's recorded output.
#[derive(Debug, Serialize, Deserialize, sqlx::FromRow)]
pub(crate) struct Payment {
    id: i64,
    amount_cents: i64,
    currency: String,
    state: String,
    provider_charge_id: Option<String>,
    created_at: String,
}

/// The receipt message the last phase enqueues.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Receipt {
    payment_id: i64,
    amount_cents: i64,
    currency: String,
    provider_charge_id: String,
}

/// Creates and charges a payment: 201 with the payment and its `Location`.
///
/// Each phase commits on its own. A crash after one of them leaves the key in progress
/// at that recovery point; once the lease (3 s) runs out, the client's retry takes over,
/// gets the committed phases' outputs without running them again, and goes on from
/// there. The provider is called with a key derived from the account, the client's key
/// and the step, so even a crash between the provider's answer and the end of the
/// `charged` phase charges once.
#[idem::idempotent(scope = account, retention = "24h", lease = "3s")]
async fn create_payment<DB: PaymentStore>(
    account: Account,
    phases: idem::Phases<DB>,
    payment: NewPayment,
    settings: web::Data<Settings>,
) -> Result<HttpResponse, PaymentError> {
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

    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/payments/{}", paid.id)))
        .json(&paid))
}

/// One of the caller's payments with its current state; another account's payment is as
/// absent as a missing one.
async fn get_payment<DB: PaymentStore>(
    account: Account,
    id: web::Path<String>,
    pool: web::Data<Pool<DB>>,
) -> Result<HttpResponse, PaymentError> {
    let Ok(id) = id.parse::<i64>() else {
        return Err(PaymentError::NotFound);
    };
    DB::get_payment(&pool, id, account.id())
        .await?
        .map(|payment| HttpResponse::Ok().json(&payment))
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

impl NewPayment {
    fn parse(body: &[u8]) -> Result<Self, PaymentError> {
        let fields: NewPaymentFields = serde_json::from_slice(body).map_err(|error| {
            if error.is_data() {
                PaymentError::InvalidPayment(error.to_string())
            } else {
                PaymentError::MalformedBody(error.to_string())
            }
        })?;
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

impl FromRequest for NewPayment {
    type Error = PaymentError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, PaymentError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut dev::Payload) -> Self::Future {
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"));
        let body = web::Bytes::from_request(req, payload);
        Box::pin(async move {
            if !is_json {
                return Err(PaymentError::UnsupportedMediaType);
            }
            let body = body
                .await
                .map_err(|error| PaymentError::MalformedBody(error.to_string()))?;
            Self::parse(&body)
        })
    }
}

/// The example's client of its own payment provider.
#[derive(Debug, Clone)]
struct Provider {
    base_url: String,
    client: reqwest::Client,
}

/// A charge as the provider answers it.
#[derive(Debug, Serialize, Deserialize)]
struct Charge {
    id: String,
    amount_cents: i64,
    currency: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct ChargeRequest {
    amount_cents: i64,
    currency: String,
}

impl Provider {
    fn new(base_url: String) -> Self {
        let client = reqwest::Client::builder()
            .timeout(PROVIDER_TIMEOUT)
            .build()
            .expect("a plain HTTP client builds");
        Self { base_url, client }
    }

    /// Charges once per `key`: the provider answers a repeated key with the first charge.
    async fn charge(
        &self,
        key: &str,
        amount_cents: i64,
        currency: &str,
    ) -> Result<Charge, PaymentError> {
        let body = serde_json::to_string(&ChargeRequest {
            amount_cents,
            currency: currency.to_owned(),
        })
        .expect("a charge request serializes");
        let response = self
            .client
            .post(format!("{}/provider/charges", self.base_url))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|error| {
                PaymentError::Provider(format!("the provider is unreachable: {error}"))
            })?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|error| {
            PaymentError::Provider(format!("the provider's answer broke off: {error}"))
        })?;
        if !status.is_success() {
            return Err(PaymentError::Provider(format!(
                "the provider answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            )));
        }
        serde_json::from_slice(&bytes).map_err(|error| {
            PaymentError::Provider(format!("the provider's answer is not a charge: {error}"))
        })
    }
}

/// The provider: charges once per `Idempotency-Key`, 201 the first time and 200 with the
/// same charge after; the same key with a different amount or currency is a 422.
async fn provider_charge<DB: PaymentStore>(
    req: HttpRequest,
    body: web::Bytes,
    pool: web::Data<Pool<DB>>,
    settings: web::Data<Settings>,
) -> Result<HttpResponse, PaymentError> {
    let key = req
        .headers()
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .filter(|key| (1..=255).contains(&key.len()))
        .ok_or(PaymentError::ProviderKeyMissing)?;
    let request: ChargeRequest = serde_json::from_slice(&body)
        .map_err(|error| PaymentError::MalformedBody(error.to_string()))?;
    // The unique constraint decides: of two calls with one key, one inserts and the other
    // finds its row (in a second statement if the first committed while it waited).
    let inserted = DB::insert_charge(&pool, key, request.amount_cents, &request.currency).await?;
    let (status, id) = match inserted {
        Some(id) => {
            if let Some(signer) = &settings.webhooks {
                let event = crate::webhooks::Event {
                    id: format!("evt_ch_{id}"),
                    kind: "charge.succeeded".to_owned(),
                    data: crate::webhooks::ChargeData {
                        charge_id: format!("ch_{id}"),
                        amount_cents: request.amount_cents,
                        currency: request.currency.clone(),
                    },
                };
                let client = settings.provider.client.clone();
                let url = format!("{}{}", settings.provider.base_url, crate::webhooks::PATH);
                // Delivered after the answer, as a provider does, in the background.
                actix_web::rt::spawn(deliver_event(client, url, signer.clone(), event));
            }
            (StatusCode::CREATED, id)
        }
        None => {
            let (id, amount_cents, currency) = DB::repeat_charge(&pool, key).await?;
            if amount_cents != request.amount_cents || currency != request.currency {
                return Err(PaymentError::ProviderKeyReused);
            }
            (StatusCode::OK, id)
        }
    };
    Ok(HttpResponse::build(status).json(Charge {
        id: format!("ch_{id}"),
        amount_cents: request.amount_cents,
        currency: request.currency,
    }))
}

/// How often the provider delivers an event at most, and the first pause between two
/// deliveries (doubled after each failure). A real provider retries for days.
const WEBHOOK_ATTEMPTS: u32 = 8;
const WEBHOOK_FIRST_PAUSE: Duration = Duration::from_millis(500);

/// The provider's side of a webhook: delivers `event` until it gets a 2xx, signing each
/// delivery anew (its own `webhook-timestamp`), again on any other answer and on a
/// timeout (the client's [`PROVIDER_TIMEOUT`]), as Standard Webhooks senders do.
async fn deliver_event(
    client: reqwest::Client,
    url: String,
    signer: idem::WebhookVerifier,
    event: crate::webhooks::Event,
) {
    let body = serde_json::to_vec(&event).expect("an event serializes");
    let mut pause = WEBHOOK_FIRST_PAUSE;
    for attempt in 1..=WEBHOOK_ATTEMPTS {
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let answer = client
            .post(&url)
            .header("content-type", "application/json")
            .header("webhook-id", &event.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header(
                "webhook-signature",
                signer.sign(&event.id, timestamp, &body),
            )
            .body(body.clone())
            .send()
            .await;
        match answer {
            Ok(response) if response.status().is_success() => return,
            Ok(response) => eprintln!(
                "orders: provider: webhook {} attempt {attempt} answered {}",
                event.id,
                response.status()
            ),
            Err(error) => eprintln!(
                "orders: provider: webhook {} attempt {attempt} failed: {error}",
                event.id
            ),
        }
        tokio::time::sleep(pause).await;
        pause *= 2;
    }
    eprintln!("orders: provider: gave up on webhook {}", event.id);
}

/// Starts the relay that delivers receipts from idem's outbox into `receipts`. Delivery
/// is at least once; the message id deduplicates, and `deliveries` counts repeats.
pub(crate) fn spawn_relay<DB: PaymentStore>(pool: Pool<DB>) -> idem::RelayHandle {
    let sink = pool.clone();
    idem::Relay::new(pool)
        .poll_interval(Duration::from_millis(200))
        .spawn(move |message: idem::Message| {
            let sink = sink.clone();
            async move { deliver_receipt(&sink, &message).await }
        })
}

async fn deliver_receipt<DB: PaymentStore>(
    pool: &Pool<DB>,
    message: &idem::Message,
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

/// Everything the payment routes answer besides success, as `application/problem+json`.
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
    /// idem could not run or record a phase; idem answers for it.
    Phase(idem::PhaseError),
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
impl From<idem::PhaseError> for PaymentError {
    fn from(error: idem::PhaseError) -> Self {
        Self::Phase(error)
    }
}

impl ResponseError for PaymentError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::MalformedBody(_) | Self::ProviderKeyMissing => StatusCode::BAD_REQUEST,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::InvalidPayment(_) | Self::ProviderKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::Provider(_) => StatusCode::BAD_GATEWAY,
            Self::Database(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Phase(error) => error.status_code(),
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            Self::Database(error) => tracing::error!(%error, "payments: database error"),
            Self::Provider(detail) => tracing::warn!(detail, "payments: provider failed"),
            Self::Phase(error) => return error.error_response(),
            _ => {}
        }
        let status = self.status_code();
        let body = serde_json::json!({
            "type": format!("{PROBLEM_BASE}{}", self.slug()),
            "title": self.title(),
            "status": status.as_u16(),
            "detail": self.detail(),
        });
        HttpResponse::build(status)
            .insert_header((
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/problem+json"),
            ))
            .body(body.to_string())
    }
}

/// The payments' SQL for one database: implemented for PostgreSQL and SQLite below.
/// `Send` futures where the relay (on `tokio::spawn`) awaits them.
pub(crate) trait PaymentStore: Store {
    /// Inserts a payment in state `created`.
    fn insert_payment(
        conn: &mut Self::Connection,
        account: i64,
        amount_cents: i64,
        currency: &str,
    ) -> impl Future<Output = sqlx::Result<Payment>>;

    /// Records the provider's charge: state `charged`.
    fn mark_charged(
        conn: &mut Self::Connection,
        id: i64,
        charge_id: &str,
    ) -> impl Future<Output = sqlx::Result<Payment>>;

    /// State `succeeded`.
    fn mark_succeeded(
        conn: &mut Self::Connection,
        id: i64,
    ) -> impl Future<Output = sqlx::Result<Payment>>;

    /// One payment of the account.
    fn get_payment(
        pool: &Pool<Self>,
        id: i64,
        account: i64,
    ) -> impl Future<Output = sqlx::Result<Option<Payment>>>;

    /// The provider's first charge for `key`; `None` when the key charged before. The
    /// unique constraint decides: of two calls with one key, one inserts and the other
    /// finds its row.
    fn insert_charge(
        pool: &Pool<Self>,
        key: &str,
        amount_cents: i64,
        currency: &str,
    ) -> impl Future<Output = sqlx::Result<Option<i64>>>;

    /// Counts a repeated call with `key`; returns the charge's `(id, amount, currency)`.
    fn repeat_charge(
        pool: &Pool<Self>,
        key: &str,
    ) -> impl Future<Output = sqlx::Result<(i64, i64, String)>>;

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
