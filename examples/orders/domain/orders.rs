//! The orders: the caller's account, the body of `POST /orders` and its checks, an order as
//! the API shows it, and the test hooks of `POST /orders`.

use std::borrow::Cow;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::problem::AppError;

/// The header that names the caller.
pub(crate) const ACCOUNT_HEADER: &str = "x-account-id";

/// Orders above this amount are declined (402), like a card over its limit.
pub(crate) const CARD_LIMIT_CENTS: i64 = 1_000_000;

/// The longest `?delay_ms=` a request may ask for.
pub(crate) const MAX_DELAY_MS: u64 = 5_000;

/// How long a request waits for a database connection before it fails (503 from idem,
/// 500 elsewhere). sqlx's default is 30 s; with the database down, a client should hear
/// so sooner than its own timeout.
pub(crate) const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long `GET /health` waits for `SELECT 1`.
pub(crate) const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// The caller, from `X-Account-Id: <positive 64-bit integer>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Account(i64);

impl Account {
    pub(crate) fn id(self) -> i64 {
        self.0
    }

    /// The account from the values of every `X-Account-Id` header of the request: exactly
    /// one, a positive integer, else 401.
    pub(crate) fn from_values<'a>(
        values: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Self, AppError> {
        let mut values = values.into_iter();
        let value = values.next().ok_or(AppError::Unauthenticated(
            "send the X-Account-Id header with your account id (a positive integer)",
        ))?;
        if values.next().is_some() {
            return Err(AppError::Unauthenticated(
                "send the X-Account-Id header only once",
            ));
        }
        std::str::from_utf8(value)
            .ok()
            .and_then(|text| text.parse::<i64>().ok())
            .filter(|&id| id > 0)
            .map(Self)
            .ok_or(AppError::Unauthenticated(
                "the X-Account-Id header must be a positive 64-bit integer",
            ))
    }
}

/// Keys are scoped by account: one account's key never meets another's.
impl idem::ScopeKey for Account {
    fn scope_key(&self) -> Cow<'_, str> {
        Cow::Owned(self.0.to_string())
    }
}

/// The body of `POST /orders`. Values are checked while the body is extracted, before
/// idem claims the key, so a rejected body leaves the key unused.
#[derive(Debug, Deserialize)]
#[serde(try_from = "NewOrderFields")]
pub(crate) struct NewOrder {
    pub(crate) item: String,
    pub(crate) quantity: i32,
    pub(crate) amount_cents: i64,
}

#[derive(Deserialize)]
struct NewOrderFields {
    item: String,
    #[serde(deserialize_with = "integer")]
    quantity: i32,
    #[serde(deserialize_with = "integer")]
    amount_cents: i64,
}

/// A JSON number the document calls `integer`. JSON Schema counts any number without a
/// fractional part as one, `2.0` and `2e3` included, and so do clients that generate from
/// the document; serde's integers take only `2`.
pub(crate) fn integer<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64>,
{
    use serde::de::{Error, Unexpected};

    let number = serde_json::Number::deserialize(deserializer)?;
    // An f64 in i64's range with no fraction converts exactly; the bounds are powers of two.
    let whole = number.as_i64().or_else(|| {
        number
            .as_f64()
            .filter(|f| f.fract() == 0.0 && (-(2f64.powi(63))..2f64.powi(63)).contains(f))
            .map(|f| f as i64)
    });
    whole.and_then(|n| T::try_from(n).ok()).ok_or_else(|| {
        D::Error::invalid_value(
            Unexpected::Other(&number.to_string()),
            &"an integer in the field's range",
        )
    })
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

/// An order as the API shows it. `created_at` is rendered by the database (UTC, to the
/// microsecond on PostgreSQL and the millisecond on SQLite), so a row always serializes to
/// the same bytes.
#[derive(Debug, Serialize, sqlx::FromRow)]
pub(crate) struct Order {
    pub(crate) id: i64,
    item: String,
    quantity: i32,
    amount_cents: i64,
    created_at: String,
}

/// The query parameters `POST /orders` accepts, all of them test hooks:
/// `delay_ms` (0 to 5000) sleeps after the insert, inside the transaction, and
/// `fail=500` or `fail=panic` fail after the insert. Anything else is a 400, checked
/// before idem claims the key.
#[derive(Debug, Default)]
pub(crate) struct TestHooks {
    delay: Duration,
    fail: Option<Failure>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Status500,
    Panic,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHooks {
    delay_ms: Option<String>,
    fail: Option<String>,
}

impl TestHooks {
    /// The hooks of a request's query string (without the `?`).
    pub(crate) fn from_query(query: &str) -> Result<Self, AppError> {
        // The message actix-web's `Query` extractor gives, which the example first used.
        let raw: RawHooks = serde_urlencoded::from_str(query)
            .map_err(|error| AppError::InvalidQuery(format!("Query deserialize error: {error}")))?;
        let delay_ms = match raw.delay_ms {
            None => 0,
            Some(text) => text
                .parse::<u64>()
                .ok()
                .filter(|&ms| ms <= MAX_DELAY_MS)
                .ok_or_else(|| {
                    AppError::InvalidQuery(format!(
                        "delay_ms must be an integer from 0 to {MAX_DELAY_MS}, not {text:?}"
                    ))
                })?,
        };
        let fail = match raw.fail.as_deref() {
            None => None,
            Some("500") => Some(Failure::Status500),
            Some("panic") => Some(Failure::Panic),
            Some(other) => {
                return Err(AppError::InvalidQuery(format!(
                    "fail must be 500 or panic, not {other:?}"
                )));
            }
        };
        Ok(Self {
            delay: Duration::from_millis(delay_ms),
            fail,
        })
    }

    /// Runs after the order row is inserted and before the response is returned.
    pub(crate) async fn after_insert(&self) -> Result<(), AppError> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        match self.fail {
            None => Ok(()),
            Some(Failure::Status500) => Err(AppError::SimulatedFailure),
            Some(Failure::Panic) => {
                panic!("orders: panicking after the insert, as ?fail=panic asked")
            }
        }
    }
}
