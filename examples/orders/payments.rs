//! `POST /payments` on actix-web: idem's phased form around the example's payment
//! provider (`POST /provider/charges`). The phases, the checks, the provider and the SQL
//! are in `domain/` (`payments.rs`, `provider.rs`, `payment_store.rs`), shared with the
//! axum binary; this file holds the routes, the extractor and the responses.
//!
//! Kept apart from `app.rs` (which the in-process tests include) because it needs the
//! server's own address and an outbox relay: the tests drive it through the real binary.

use actix_web::http::header;
use actix_web::http::{Method, StatusCode};
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError, dev, web};
use sqlx::Pool;

use crate::app::domain::payments::{self, NewPayment, PaymentError};
use crate::app::domain::provider;
use crate::app::{Account, JsonBodyFuture, json_body, problem_response, resource};

use crate::app::domain::payment_store::PaymentStore;
use crate::app::domain::payments::Settings;

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

/// Creates and charges a payment (`domain::payments::pay`): 201 with the payment and its
/// `Location`.
#[idem::idempotent(scope = account, retention = "24h", lease = "3s")]
async fn create_payment<DB: PaymentStore>(
    account: Account,
    phases: idem::Phases<DB>,
    payment: NewPayment,
    settings: web::Data<Settings>,
) -> Result<HttpResponse, PaymentError> {
    let paid = payments::pay(account, &mut phases, &payment, &settings).await?;
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/payments/{}", paid.id)))
        .json(&paid))
}

/// One of the caller's payments with its current state.
async fn get_payment<DB: PaymentStore>(
    account: Account,
    id: web::Path<String>,
    pool: web::Data<Pool<DB>>,
) -> Result<HttpResponse, PaymentError> {
    let payment = payments::find_payment(&pool, account, &id).await?;
    Ok(HttpResponse::Ok().json(&payment))
}

impl FromRequest for NewPayment {
    type Error = PaymentError;
    type Future = JsonBodyFuture<Self>;

    fn from_request(req: &HttpRequest, payload: &mut dev::Payload) -> Self::Future {
        json_body(req, payload)
    }
}

/// The provider (`domain::provider::provider_charge`). It keeps no idem key of its own:
/// like a real provider, it charges once per `Idempotency-Key` its caller sends, by a
/// unique constraint on it.
#[idem::exempt(
    "the provider's natural key: one charge per Idempotency-Key, by a unique constraint"
)]
async fn provider_charge<DB: PaymentStore>(
    req: HttpRequest,
    body: web::Bytes,
    pool: web::Data<Pool<DB>>,
    settings: web::Data<Settings>,
) -> Result<HttpResponse, PaymentError> {
    let key = req.headers().get("idempotency-key").map(|v| v.as_bytes());
    let (status, charge) = provider::provider_charge(&pool, &settings, key, &body).await?;
    let status = StatusCode::from_u16(status).expect("a charge's status is valid");
    Ok(HttpResponse::build(status).json(charge))
}

impl ResponseError for PaymentError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Phase(error) => error.status_code(),
            other => StatusCode::from_u16(other.status()).expect("a problem's status is valid"),
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self.problem() {
            Ok(problem) => problem_response(problem),
            Err(phase) => phase.error_response(),
        }
    }
}
