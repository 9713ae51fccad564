//! SCAFFOLDING, to be replaced by `examples/orders-axum/app.rs` when it lands: the orders
//! service's HTTP contract on axum (`POST /orders`, `GET /orders`, `GET /orders/{id}`,
//! `GET /health`), only so the harness can be proven on axum before the example exists.
//! Problems are rendered by the actix example's own `AppError`, so they match it byte
//! for byte.

use std::borrow::Cow;

use actix_web::ResponseError;
use actix_web::body::MessageBody;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use axum::{Extension, Router};
use sqlx::{Pool, Postgres, Sqlite};

use super::app::{ACCOUNT_HEADER, AppError, NewOrder, Store};

/// The caller, from `X-Account-Id`, with the example's 401 when it is missing or bad.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Account(i64);

impl Account {
    pub(crate) fn id(self) -> i64 {
        self.0
    }
}

impl idem::ScopeKey for Account {
    fn scope_key(&self) -> Cow<'_, str> {
        Cow::Owned(self.0.to_string())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Account {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        let mut values = parts.headers.get_all(ACCOUNT_HEADER).iter();
        let value = values.next().ok_or(Problem(AppError::Unauthenticated(
            "send the X-Account-Id header with your account id (a positive integer)",
        )))?;
        if values.next().is_some() {
            return Err(Problem(AppError::Unauthenticated(
                "send the X-Account-Id header only once",
            )));
        }
        value
            .to_str()
            .ok()
            .and_then(|text| text.parse::<i64>().ok())
            .filter(|&id| id > 0)
            .map(Self)
            .ok_or(Problem(AppError::Unauthenticated(
                "the X-Account-Id header must be a positive 64-bit integer",
            )))
    }
}

/// The example's test hooks, parsed by the example's own code from the query.
pub(crate) struct Hooks(super::app::TestHooks);

impl<S: Send + Sync> FromRequestParts<S> for Hooks {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        let query = parts.uri.query().unwrap_or("");
        let req = actix_web::test::TestRequest::default()
            .uri(&format!("/?{query}"))
            .to_http_request();
        let mut payload = actix_web::dev::Payload::None;
        // The example's extractor is ready at once; its request is not `Send`.
        <super::app::TestHooks as actix_web::FromRequest>::from_request(&req, &mut payload)
            .into_inner()
            .map(Hooks)
            .map_err(Problem)
    }
}

/// The order body: 415 unless JSON, 400 when malformed, 422 when not a valid order; and
/// its amount (the example's `NewOrder` keeps its fields to itself).
pub(crate) struct OrderBody(NewOrder, i64);

impl<S: Send + Sync> FromRequest<S> for OrderBody {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|text| text.starts_with("application/json"));
        if !json {
            return Err(Problem(AppError::UnsupportedMediaType));
        }
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|error| Problem(AppError::MalformedBody(error.to_string())))?;
        let order = serde_json::from_slice(&bytes).map_err(|error| {
            Problem(if error.is_data() {
                AppError::InvalidOrder(error.to_string())
            } else {
                AppError::MalformedBody(error.to_string())
            })
        })?;
        let value: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
        Ok(OrderBody(
            order,
            value["amount_cents"].as_i64().unwrap_or(0),
        ))
    }
}

/// The example's `AppError`, answered as the actix example answers it.
#[derive(Debug)]
pub(crate) struct Problem(AppError);

impl From<sqlx::Error> for Problem {
    fn from(error: sqlx::Error) -> Self {
        Self(AppError::Database(error))
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let actix = self.0.error_response();
        let mut response = Response::new(axum::body::Body::empty());
        *response.status_mut() = StatusCode::from_u16(actix.status().as_u16()).expect("status");
        for (name, value) in actix.headers() {
            response.headers_mut().append(
                header::HeaderName::from_bytes(name.as_str().as_bytes()).expect("name"),
                HeaderValue::from_bytes(value.as_bytes()).expect("value"),
            );
        }
        let body = actix.into_body().try_into_bytes().expect("a bytes body");
        *response.body_mut() = body.into();
        response
    }
}

fn json(status: StatusCode, value: &impl serde::Serialize) -> Response {
    let body = serde_json::to_vec(value).expect("serialize");
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from(body),
    )
        .into_response()
}

/// `POST /orders`, once per database: idempotent axum handlers are not generic.
macro_rules! create_order {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::*;

            #[idem::axum::idempotent(scope = account, retention = "24h")]
            pub(super) async fn create_order(
                account: Account,
                hooks: Hooks,
                tx: idem::Tx<'_, $db>,
                OrderBody(order, amount_cents): OrderBody,
            ) -> Result<Response, Problem> {
                if amount_cents > super::super::app::CARD_LIMIT_CENTS {
                    return Err(Problem(AppError::CardDeclined { amount_cents }));
                }
                let created = <$db as Store>::insert_order(&mut tx, account.id(), &order).await?;
                hooks.0.after_insert().await.map_err(Problem)?;
                let mut response = json(StatusCode::CREATED, &created);
                let id = serde_json::to_value(&created).expect("an order")["id"].clone();
                let location = format!("/orders/{id}");
                response.headers_mut().insert(
                    header::LOCATION,
                    HeaderValue::from_str(&location).expect("location"),
                );
                Ok(response)
            }

            pub(super) async fn list_orders(
                account: Account,
                Extension(pool): Extension<Pool<$db>>,
            ) -> Result<Response, Problem> {
                let orders = <$db as Store>::list_orders(&pool, account.id()).await?;
                Ok(json(StatusCode::OK, &orders))
            }

            pub(super) async fn get_order(
                account: Account,
                Extension(pool): Extension<Pool<$db>>,
                Path(id): Path<String>,
            ) -> Result<Response, Problem> {
                let id = id.parse().map_err(|_| Problem(AppError::NotFound))?;
                <$db as Store>::get_order(&pool, id, account.id())
                    .await?
                    .map(|order| json(StatusCode::OK, &order))
                    .ok_or(Problem(AppError::NotFound))
            }

            pub(super) async fn health(Extension(pool): Extension<Pool<$db>>) -> Result<Response, Problem> {
                use sqlx::Connection;
                let mut conn = pool
                    .acquire()
                    .await
                    .map_err(|e| Problem(AppError::Unavailable(e.to_string())))?;
                conn.ping()
                    .await
                    .map_err(|e| Problem(AppError::Unavailable(e.to_string())))?;
                Ok(json(StatusCode::OK, &serde_json::json!({ "status": "ok" })))
            }
        }
    };
}

create_order!(on_postgres, Postgres);
create_order!(on_sqlite, Sqlite);

/// The database's handlers: the store's futures are not known to be `Send` in generic
/// code, which axum requires of a handler's.
pub(crate) trait AxumOrders: Store {
    fn orders() -> MethodRouter;
    fn order() -> MethodRouter;
    fn health() -> MethodRouter;
}

macro_rules! axum_orders {
    ($db:ty, $module:ident) => {
        impl AxumOrders for $db {
            fn orders() -> MethodRouter {
                get($module::list_orders).merge(post($module::create_order))
            }
            fn order() -> MethodRouter {
                get($module::get_order)
            }
            fn health() -> MethodRouter {
                get($module::health)
            }
        }
    };
}

axum_orders!(Postgres, on_postgres);
axum_orders!(Sqlite, on_sqlite);

fn allow(methods: &'static str) -> impl Fn() -> std::future::Ready<Problem> + Clone {
    move || std::future::ready(Problem(AppError::MethodNotAllowed(methods.to_owned())))
}

/// The orders service's routes on axum, with `idem` and its pool in the extensions.
pub(crate) fn router<DB: AxumOrders>(idem: &idem::Idem<DB>) -> Router {
    Router::new()
        .route("/orders", DB::orders().fallback(allow("GET, POST")))
        .route("/orders/{id}", DB::order().fallback(allow("GET")))
        .route("/health", DB::health().fallback(allow("GET")))
        .layer(Extension(idem.clone()))
        .layer(Extension(idem.pool().clone()))
}
