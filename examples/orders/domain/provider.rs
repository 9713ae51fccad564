//! The example's payment provider, served by the example itself (`POST /provider/charges`)
//! so the whole story runs in one process, and the client the payments call it with. It
//! deduplicates by a unique constraint on the key it is called with, as real payment
//! providers do with `Idempotency-Key`, and announces each new charge with a signed
//! webhook.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::Pool;

use super::payment_store::PaymentStore;
use super::payments::{PaymentError, Settings};
use super::webhooks::{ChargeData, Event, PATH};

/// How long the provider may take to answer before the charge phase gives up (502; the
/// client's retry charges again with the same provider key, so nothing is charged twice).
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the provider delivers an event at most, and the first pause between two
/// deliveries (doubled after each failure). A real provider retries for days.
const WEBHOOK_ATTEMPTS: u32 = 8;
const WEBHOOK_FIRST_PAUSE: Duration = Duration::from_millis(500);

/// The example's client of its own payment provider.
#[derive(Debug, Clone)]
pub(crate) struct Provider {
    base_url: String,
    client: reqwest::Client,
}

/// A charge as the provider answers it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Charge {
    pub(crate) id: String,
    amount_cents: i64,
    currency: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct ChargeRequest {
    amount_cents: i64,
    currency: String,
}

impl Provider {
    pub(crate) fn new(base_url: String) -> Self {
        let client = reqwest::Client::builder()
            .timeout(PROVIDER_TIMEOUT)
            .build()
            .expect("a plain HTTP client builds");
        Self { base_url, client }
    }

    /// Charges once per `key`: the provider answers a repeated key with the first charge.
    pub(crate) async fn charge(
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

/// The provider's side of `POST /provider/charges`, given the request's `Idempotency-Key`
/// and body: charges once per key, 201 the first time and 200 with the same charge after;
/// the same key with a different amount or currency is a 422. Returns the status and the
/// charge to send as JSON.
pub(crate) async fn provider_charge<DB: PaymentStore>(
    pool: &Pool<DB>,
    settings: &Settings,
    key: Option<&[u8]>,
    body: &[u8],
) -> Result<(u16, Charge), PaymentError> {
    let key = key
        .and_then(|value| std::str::from_utf8(value).ok())
        .filter(|key| (1..=255).contains(&key.len()))
        .ok_or(PaymentError::ProviderKeyMissing)?;
    let request: ChargeRequest = serde_json::from_slice(body)
        .map_err(|error| PaymentError::MalformedBody(error.to_string()))?;
    // The unique constraint decides: of two calls with one key, one inserts and the other
    // finds its row (in a second statement if the first committed while it waited).
    let inserted = DB::insert_charge(pool, key, request.amount_cents, &request.currency).await?;
    let (status, id) = match inserted {
        Some(id) => {
            if let Some(signer) = &settings.webhooks {
                let event = Event {
                    id: format!("evt_ch_{id}"),
                    kind: "charge.succeeded".to_owned(),
                    data: ChargeData {
                        charge_id: format!("ch_{id}"),
                        amount_cents: request.amount_cents,
                        currency: request.currency.clone(),
                    },
                };
                let provider = &settings.provider;
                let url = format!("{}{PATH}", provider.base_url);
                // Delivered after the answer, as a provider does, in the background.
                tokio::spawn(deliver_event(
                    provider.client.clone(),
                    url,
                    signer.clone(),
                    event,
                ));
            }
            (201, id)
        }
        None => {
            let (id, amount_cents, currency) = DB::repeat_charge(pool, key).await?;
            if amount_cents != request.amount_cents || currency != request.currency {
                return Err(PaymentError::ProviderKeyReused);
            }
            (200, id)
        }
    };
    let charge = Charge {
        id: format!("ch_{id}"),
        amount_cents: request.amount_cents,
        currency: request.currency,
    };
    Ok((status, charge))
}

/// The provider's side of a webhook: delivers `event` until it gets a 2xx, signing each
/// delivery anew (its own `webhook-timestamp`), again on any other answer and on a
/// timeout (the client's [`PROVIDER_TIMEOUT`]), as Standard Webhooks senders do.
async fn deliver_event(
    client: reqwest::Client,
    url: String,
    signer: idem::WebhookVerifier,
    event: Event,
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
