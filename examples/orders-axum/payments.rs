//! `POST /payments` on axum: idem's phased form around the example's payment provider
//! (`POST /provider/charges`). The phases, the checks, the provider and the SQL are the
//! actix binary's `domain/` files (`payments.rs`, `provider.rs`, `payment_store.rs`); this
//! file holds the routes and the responses.

use axum::body::Bytes;
use axum::extract::Path;
use axum::extract::rejection::PathRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use axum::{Extension, Json, Router};
use sqlx::{Pool, Postgres, Sqlite};

use crate::app::{created_at, methods};
use crate::domain::orders::Account;
use crate::domain::payment_store::PaymentStore;
use crate::domain::payments::{self, NewPayment, PaymentError, Settings};
use crate::domain::provider;

/// The payment routes and the provider's, with their settings in the requests'
/// extensions (another method is a 405, as everywhere).
pub(crate) fn router<DB: PaymentRoutes>(pool: &Pool<DB>, settings: Settings) -> Router {
    Router::new()
        .route("/payments", methods("POST", DB::create_payment()))
        .route("/payments/{id}", methods("GET", get(get_payment::<DB>)))
        .route(
            "/provider/charges",
            methods("POST", post(provider_charge::<DB>)),
        )
        .layer(Extension(pool.clone()))
        .layer(Extension(settings))
}

/// `router` for a database: the `POST /payments` handler stamped out for it.
pub(crate) trait PaymentRoutes: PaymentStore {
    /// `POST /payments`.
    fn create_payment() -> MethodRouter;
}

/// Creates and charges a payment (`domain::payments::pay`): 201 with the payment and its
/// `Location`. One handler per database, as `#[idem::axum::idempotent]` requires.
macro_rules! payment_handlers {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::*;

            #[idem::axum::idempotent(scope = account, retention = "24h", lease = "3s")]
            pub(crate) async fn create_payment(
                account: Account,
                phases: idem::Phases<$db>,
                Extension(settings): Extension<Settings>,
                payment: NewPayment,
            ) -> Result<Response, PaymentError> {
                let paid = payments::pay(account, &mut phases, &payment, &settings).await?;
                Ok(created_at(format!("/payments/{}", paid.id), &paid))
            }
        }

        impl PaymentRoutes for $db {
            fn create_payment() -> MethodRouter {
                post($module::create_payment)
            }
        }
    };
}

payment_handlers!(on_postgres, Postgres);
payment_handlers!(on_sqlite, Sqlite);

/// One of the caller's payments with its current state.
async fn get_payment<DB: PaymentStore>(
    account: Account,
    id: Result<Path<String>, PathRejection>,
    Extension(pool): Extension<Pool<DB>>,
) -> Result<Response, PaymentError> {
    // A segment that does not decode (not UTF-8) is no payment's id either.
    let Ok(Path(id)) = id else {
        return Err(PaymentError::NotFound);
    };
    let payment = payments::find_payment(&pool, account, &id).await?;
    Ok(Json(payment).into_response())
}

/// The provider (`domain::provider::provider_charge`). It keeps no idem key of its own:
/// like a real provider, it charges once per `Idempotency-Key` its caller sends, by a
/// unique constraint on it.
#[idem::exempt(
    "the provider's natural key: one charge per Idempotency-Key, by a unique constraint"
)]
async fn provider_charge<DB: PaymentStore>(
    headers: HeaderMap,
    Extension(pool): Extension<Pool<DB>>,
    Extension(settings): Extension<Settings>,
    body: Bytes,
) -> Result<Response, PaymentError> {
    let key = headers.get("idempotency-key").map(|value| value.as_bytes());
    let (status, charge) = provider::provider_charge(&pool, &settings, key, &body).await?;
    let status = StatusCode::from_u16(status).expect("a charge's status is valid");
    Ok((status, Json(charge)).into_response())
}
