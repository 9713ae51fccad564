//! The orders service on actix-web: everything but `main`, so the integration tests build
//! the very same application in-process (`#[path = "../examples/orders/app.rs"] mod app;`).
//!
//! See `main.rs` for the HTTP contract and `README.md` beside this file for the problem
//! types.
//!
//! This file holds only what is actix-web's: the routes, the extractors and the
//! conversion of answers into `HttpResponse`. Everything else (the domain, its checks, the
//! SQL of both databases, every problem's status and text) is in `domain/`, which the axum
//! binary (`examples/orders-axum`) shares line for line.
//!
//! The handlers are generic over the database: one `create_order` serves PostgreSQL and
//! SQLite alike, naming its backend only through its `idem::Tx<'_, DB>`.

#[path = "domain/mod.rs"]
pub(crate) mod domain;
/// `POST /notifications` (keys in Redis), here so the in-process tests build it too.
#[path = "notifications.rs"]
pub(crate) mod notifications;

use std::future::{Future, Ready, ready};
use std::pin::Pin;

use actix_web::error::JsonPayloadError;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError, dev, web};
use sqlx::{Connection, Pool};

use domain::body::{self, JsonBody};
// The names the binary's other files and the integration tests use.
pub(crate) use domain::orders::{ACCOUNT_HEADER, Account, HEALTH_TIMEOUT, NewOrder, TestHooks};
pub(crate) use domain::problem::{AppError, PROBLEM_JSON, Problem};
pub(crate) use domain::store::Store;
// Only the tests name these.
#[allow(unused_imports)]
pub(crate) use domain::{orders::CARD_LIMIT_CENTS, store::setup};

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

impl FromRequest for Account {
    type Error = AppError;
    type Future = Ready<Result<Self, AppError>>;

    fn from_request(req: &HttpRequest, _: &mut dev::Payload) -> Self::Future {
        let values = req.headers().get_all(ACCOUNT_HEADER);
        ready(Self::from_values(values.map(HeaderValue::as_bytes)))
    }
}

/// What [`json_body`] returns: the extractor's future of a payment or a notification.
pub(crate) type JsonBodyFuture<T> =
    Pin<Box<dyn Future<Output = Result<T, <T as JsonBody>::Error>>>>;

/// A JSON body the domain parses itself, the whole of a `FromRequest` for it: another
/// media type is a 415 before the body is read, then the bytes (actix-web's payload
/// limit applies), then the fields.
pub(crate) fn json_body<T>(req: &HttpRequest, payload: &mut dev::Payload) -> JsonBodyFuture<T>
where
    T: JsonBody + 'static,
    T::Error: 'static,
{
    let content_type = req.headers().get(header::CONTENT_TYPE);
    let is_json = body::is_json(content_type.map(HeaderValue::as_bytes));
    let bytes = web::Bytes::from_request(req, payload);
    Box::pin(async move {
        if !is_json {
            return Err(T::unsupported_media_type());
        }
        let bytes = bytes
            .await
            .map_err(|error| T::malformed(error.to_string()))?;
        T::parse(&bytes)
    })
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
    let created = domain::store::place_order::<DB>(&mut tx, account, &order, &hooks).await?;
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

/// A problem as actix-web's response.
pub(crate) fn problem_response(problem: Problem) -> HttpResponse {
    let status = StatusCode::from_u16(problem.status).expect("a problem's status is valid");
    let mut response = HttpResponse::build(status);
    response.insert_header((header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON)));
    if let Some(allow) = &problem.allow {
        response.insert_header((header::ALLOW, allow.as_str()));
    }
    response.body(problem.body)
}

impl ResponseError for AppError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status()).expect("a problem's status is valid")
    }

    fn error_response(&self) -> HttpResponse {
        problem_response(self.problem())
    }
}
