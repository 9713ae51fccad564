//! The orders service: everything but `main`, so the integration tests build the very
//! same application in-process (`#[path = "../examples/orders/app.rs"] mod app;`).
//!
//! See `main.rs` for the HTTP contract and `README.md` beside this file for the problem
//! types.
//!
//! The handlers are generic over the database: one `create_order` serves PostgreSQL and
//! SQLite alike, naming its backend only through its `idem::Tx<'_, DB>`. The SQL lives in
//! the [`Store`] implementations at the end of this file, one per database.

use std::borrow::Cow;
use std::fmt;
use std::future::{Future, Ready, ready};
use std::time::Duration;

use actix_web::error::JsonPayloadError;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError, dev, web};
use serde::{Deserialize, Serialize};
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::{Connection, Pool, Postgres, Sqlite};

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

/// Where the example's problem types are described; each `type` is this plus a slug.
pub(crate) const PROBLEM_BASE: &str =
    "https://github.com/idem-rs/idem/blob/main/examples/orders/README.md#";

/// Applies idem's migrations (its own history, `_idem_migrations`) and then the example's
/// (sqlx's default `_sqlx_migrations`). Either order works: the histories never meet.
pub(crate) async fn setup<DB: Store>(pool: &Pool<DB>) -> Result<(), MigrateError> {
    idem::migrate(pool).await?;
    DB::migrate_app(pool).await
}

/// Registers idem, the pool, the extractor error handlers, the order routes and
/// `GET /health`.
///
/// Each path is one [`resource`] with all its methods, so that a method it does not
/// serve is a 405 rather than the 404 of a path that does not exist.
pub(crate) fn configure<DB: Store>(cfg: &mut web::ServiceConfig, idem: &idem::Idem<DB>) {
    cfg.app_data(idem.clone())
        .app_data(web::Data::new(idem.pool().clone()))
        .app_data(web::JsonConfig::default().error_handler(json_error))
        .app_data(web::PathConfig::default().error_handler(|_, _| AppError::NotFound.into()))
        .service(resource(
            "/orders",
            [
                (Method::GET, web::to(list_orders::<DB>)),
                (Method::POST, web::to(create_order::<DB>)),
            ],
        ))
        .service(resource(
            "/orders/{id}",
            [(Method::GET, web::to(get_order::<DB>))],
        ))
        .service(resource("/health", [(Method::GET, web::to(health::<DB>))]));
}

/// One path and the handler of each method it serves; any other method is answered 405
/// `method-not-allowed` with `Allow` listing these (RFC 9110, section 15.5.6).
///
/// actix's route attributes, and `.route(path, web::post())`, make one resource per
/// method, guarded by it: a request whose method no guard accepts falls through to the
/// application's 404. One resource with a default service knows the path exists.
pub(crate) fn resource(
    path: &str,
    routes: impl IntoIterator<Item = (Method, actix_web::Route)>,
) -> actix_web::Resource {
    let mut resource = web::resource(path);
    let mut allow = Vec::new();
    for (method, route) in routes {
        allow.push(method.to_string());
        resource = resource.route(route.method(method));
    }
    let allow = allow.join(", ");
    resource.default_service(web::to(move || {
        let error = AppError::MethodNotAllowed(allow.clone());
        ready(Err::<HttpResponse, _>(error))
    }))
}

/// 200 while a pooled connection answers a ping within [`HEALTH_TIMEOUT`], else 503
/// `database-unavailable`: what a load balancer or orchestrator polls.
async fn health<DB: Store>(pool: web::Data<Pool<DB>>) -> Result<HttpResponse, AppError> {
    let ping = async {
        let mut conn = pool.acquire().await?;
        conn.ping().await
    };
    match tokio::time::timeout(HEALTH_TIMEOUT, ping).await {
        Ok(Ok(())) => Ok(HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))),
        Ok(Err(error)) => Err(AppError::Unavailable(error.to_string())),
        Err(_) => Err(AppError::Unavailable(format!(
            "the database did not answer within {HEALTH_TIMEOUT:?}"
        ))),
    }
}

/// The caller, from `X-Account-Id: <positive 64-bit integer>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Account(i64);

impl Account {
    pub(crate) fn id(self) -> i64 {
        self.0
    }

    fn from_headers(req: &HttpRequest) -> Result<Self, AppError> {
        let mut values = req.headers().get_all(ACCOUNT_HEADER);
        let value = values.next().ok_or(AppError::Unauthenticated(
            "send the X-Account-Id header with your account id (a positive integer)",
        ))?;
        if values.next().is_some() {
            return Err(AppError::Unauthenticated(
                "send the X-Account-Id header only once",
            ));
        }
        value
            .to_str()
            .ok()
            .and_then(|text| text.parse::<i64>().ok())
            .filter(|&id| id > 0)
            .map(Self)
            .ok_or(AppError::Unauthenticated(
                "the X-Account-Id header must be a positive 64-bit integer",
            ))
    }
}

impl FromRequest for Account {
    type Error = AppError;
    type Future = Ready<Result<Self, AppError>>;

    fn from_request(req: &HttpRequest, _: &mut dev::Payload) -> Self::Future {
        ready(Self::from_headers(req))
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
    item: String,
    quantity: i32,
    amount_cents: i64,
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
    id: i64,
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
    fn from_query(query: &str) -> Result<Self, AppError> {
        let raw = web::Query::<RawHooks>::from_query(query)
            .map_err(|error| AppError::InvalidQuery(error.to_string()))?
            .into_inner();
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

impl FromRequest for TestHooks {
    type Error = AppError;
    type Future = Ready<Result<Self, AppError>>;

    fn from_request(req: &HttpRequest, _: &mut dev::Payload) -> Self::Future {
        ready(Self::from_query(req.query_string()))
    }
}

/// `POST /orders`: creates an order: 201 with the order and its `Location`, or 402 when
/// the card is declined. Both outcomes are stored and replayed for the key.
///
/// Generic over the database: `tx` is an `idem::Tx<'_, sqlx::Postgres>` or an
/// `idem::Tx<'_, sqlx::Sqlite>`, whichever `Idem` the application registered.
#[idem::idempotent(scope = account, retention = "24h")]
async fn create_order<DB: Store>(
    account: Account,
    tx: idem::Tx<'_, DB>,
    order: web::Json<NewOrder>,
    hooks: TestHooks,
) -> Result<HttpResponse, AppError> {
    let order = order.into_inner();
    if order.amount_cents > CARD_LIMIT_CENTS {
        return Err(AppError::CardDeclined {
            amount_cents: order.amount_cents,
        });
    }
    let created = DB::insert_order(&mut tx, account.id(), &order).await?;
    hooks.after_insert().await?;
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/orders/{}", created.id)))
        .json(&created))
}

/// `GET /orders`: the caller's orders, oldest first.
async fn list_orders<DB: Store>(
    account: Account,
    pool: web::Data<Pool<DB>>,
) -> Result<HttpResponse, AppError> {
    let orders = DB::list_orders(&pool, account.id()).await?;
    Ok(HttpResponse::Ok().json(&orders))
}

/// `GET /orders/{id}`: one of the caller's orders; another account's order is as absent
/// as a missing one.
async fn get_order<DB: Store>(
    account: Account,
    id: web::Path<i64>,
    pool: web::Data<Pool<DB>>,
) -> Result<HttpResponse, AppError> {
    DB::get_order(&pool, id.into_inner(), account.id())
        .await?
        .map(|order| HttpResponse::Ok().json(&order))
        .ok_or(AppError::NotFound)
}

/// Malformed JSON is a 400, well-formed JSON that is not a valid order a 422, and any
/// other content type a 415. All of them happen before the key is claimed.
pub(crate) fn json_error(error: JsonPayloadError, _: &HttpRequest) -> actix_web::Error {
    match error {
        JsonPayloadError::ContentType => AppError::UnsupportedMediaType,
        JsonPayloadError::Deserialize(error) if error.is_data() => {
            AppError::InvalidOrder(error.to_string())
        }
        error @ (JsonPayloadError::OverflowKnownLength { .. }
        | JsonPayloadError::Overflow { .. }) => AppError::BodyTooLarge(error.to_string()),
        error => AppError::MalformedBody(error.to_string()),
    }
    .into()
}

/// Everything the service answers besides success, as `application/problem+json`.
#[derive(Debug)]
pub(crate) enum AppError {
    /// 401: no usable `X-Account-Id`.
    Unauthenticated(&'static str),
    /// 400: the body is not JSON.
    MalformedBody(String),
    /// 415: the body is not sent as JSON.
    UnsupportedMediaType,
    /// 413: the body is over actix's JSON limit.
    BodyTooLarge(String),
    /// 422: JSON, but not a valid order.
    InvalidOrder(String),
    /// 400: a query parameter the endpoint does not accept.
    InvalidQuery(String),
    /// 422: a webhook delivery whose JSON is not a valid event.
    InvalidEvent(String),
    /// 402: the amount is over the card limit. A business outcome, stored for replay.
    CardDeclined { amount_cents: i64 },
    /// 404: no such order for this account.
    NotFound,
    /// 405: the path exists but does not serve this method; the methods it serves.
    MethodNotAllowed(String),
    /// 500: `?fail=500` asked for it; idem rolls the insert back.
    SimulatedFailure,
    /// 500: the database failed; idem rolls everything back.
    Database(sqlx::Error),
    /// 503: `GET /health` could not reach the database.
    Unavailable(String),
}

impl AppError {
    fn slug(&self) -> &'static str {
        match self {
            Self::Unauthenticated(_) => "unauthenticated",
            Self::MalformedBody(_) => "malformed-body",
            Self::UnsupportedMediaType => "unsupported-media-type",
            Self::BodyTooLarge(_) => "body-too-large",
            Self::InvalidOrder(_) => "invalid-order",
            Self::InvalidQuery(_) => "invalid-query",
            Self::InvalidEvent(_) => "invalid-event",
            Self::CardDeclined { .. } => "card-declined",
            Self::NotFound => "order-not-found",
            Self::MethodNotAllowed(_) => "method-not-allowed",
            Self::SimulatedFailure => "simulated-failure",
            Self::Database(_) => "internal-error",
            Self::Unavailable(_) => "database-unavailable",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Self::Unauthenticated(_) => "Unauthenticated",
            Self::MalformedBody(_) => "Malformed request body",
            Self::UnsupportedMediaType => "Unsupported media type",
            Self::BodyTooLarge(_) => "Request body too large",
            Self::InvalidOrder(_) => "Invalid order",
            Self::InvalidQuery(_) => "Invalid query parameter",
            Self::InvalidEvent(_) => "Invalid event",
            Self::CardDeclined { .. } => "Card declined",
            Self::NotFound => "Order not found",
            Self::MethodNotAllowed(_) => "Method not allowed",
            Self::SimulatedFailure => "Simulated failure",
            Self::Database(_) => "Internal error",
            Self::Unavailable(_) => "Database unavailable",
        }
    }

    fn detail(&self) -> String {
        match self {
            Self::Unauthenticated(detail) => (*detail).to_owned(),
            Self::MalformedBody(detail)
            | Self::BodyTooLarge(detail)
            | Self::InvalidOrder(detail)
            | Self::InvalidQuery(detail)
            | Self::InvalidEvent(detail)
            | Self::Unavailable(detail) => detail.clone(),
            Self::UnsupportedMediaType => "send the order as application/json".to_owned(),
            Self::CardDeclined { amount_cents } => format!(
                "the card was declined: {amount_cents} cents is over the limit of \
                 {CARD_LIMIT_CENTS} cents"
            ),
            Self::NotFound => "there is no such order in this account".to_owned(),
            Self::MethodNotAllowed(allow) => format!("this path answers {allow} only"),
            Self::SimulatedFailure => {
                "failed after the insert, as ?fail=500 asked; nothing was saved".to_owned()
            }
            // The database's message stays in the log, not in the response.
            Self::Database(_) => "the request failed and nothing was saved; retry it".to_owned(),
        }
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Database(error) => write!(f, "database error: {error}"),
            other => f.write_str(&other.detail()),
        }
    }
}

impl From<sqlx::Error> for AppError {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(error)
    }
}

impl ResponseError for AppError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Self::MalformedBody(_) | Self::InvalidQuery(_) => StatusCode::BAD_REQUEST,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::BodyTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::InvalidOrder(_) | Self::InvalidEvent(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::CardDeclined { .. } => StatusCode::PAYMENT_REQUIRED,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::SimulatedFailure | Self::Database(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        if let Self::Database(error) = self {
            tracing::error!(%error, "orders: database error");
        }
        let status = self.status_code();
        let body = serde_json::json!({
            "type": format!("{PROBLEM_BASE}{}", self.slug()),
            "title": self.title(),
            "status": status.as_u16(),
            "detail": self.detail(),
        });
        let mut response = HttpResponse::build(status);
        response.insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        ));
        if let Self::MethodNotAllowed(allow) = self {
            response.insert_header((header::ALLOW, allow.as_str()));
        }
        response.body(body.to_string())
    }
}

/// The example's SQL for one database: implemented for PostgreSQL and SQLite below.
pub(crate) trait Store: idem::Backend {
    /// The example's own migrations (`examples/orders/migrations/<backend>`).
    fn app_migrator() -> &'static Migrator;

    /// Applies [`app_migrator`](Self::app_migrator).
    fn migrate_app(pool: &Pool<Self>) -> impl Future<Output = Result<(), MigrateError>>;

    /// Inserts an order in the request's transaction.
    fn insert_order(
        conn: &mut Self::Connection,
        account: i64,
        order: &NewOrder,
    ) -> impl Future<Output = sqlx::Result<Order>>;

    /// The account's orders, oldest first.
    fn list_orders(
        pool: &Pool<Self>,
        account: i64,
    ) -> impl Future<Output = sqlx::Result<Vec<Order>>>;

    /// One order of the account.
    fn get_order(
        pool: &Pool<Self>,
        id: i64,
        account: i64,
    ) -> impl Future<Output = sqlx::Result<Option<Order>>>;
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
