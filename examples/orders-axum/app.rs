//! The orders service on axum 0.8: the same HTTP contract as the actix-web example
//! (`examples/orders/main.rs` describes it), answer for answer, so every black-box test of
//! the example passes against either binary.
//!
//! This file and `extract.rs` hold only what is axum's: the routes, the extractors and the
//! conversion of answers into axum's `Response`. The domain, its checks, the SQL of both
//! databases and every problem's status and text are the actix binary's own files, in
//! `examples/orders/domain/`, included here (`main.rs`) as `crate::domain`.
//!
//! `#[idem::axum::idempotent]` handlers name their database (axum handlers cannot be
//! generic), so `create_order` is written once and stamped out per database by
//! `order_handlers!`; [`OrderRoutes`] picks the one of the router's database. Everything
//! they call is generic.

#[path = "extract.rs"]
pub(crate) mod extract;
/// `POST /notifications` (keys in Redis), here so the in-process tests build it too.
#[path = "notifications.rs"]
pub(crate) mod notifications;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use axum::{Extension, Json, Router};
use serde::Serialize;
use sqlx::{Connection, Pool, Postgres, Sqlite};

pub(crate) use super::domain;
use domain::orders::{Account, HEALTH_TIMEOUT};
use domain::payments::PaymentError;
use domain::problem::{AppError, PROBLEM_JSON, Problem};
use domain::store::{Store, place_order};
use extract::{OrderId, OrderRequest};

/// The router of the orders and `GET /health` on `idem`'s database: `POST /orders`,
/// `GET /orders`, `GET /orders/{id}` and `GET /health`, with `idem` and its pool in the
/// requests' extensions.
///
/// A method a path does not serve is a 405 with `Allow` ([`methods`]); a path that does
/// not exist is axum's 404, as it is actix-web's.
pub(crate) fn router<DB: OrderRoutes>(idem: &idem::Idem<DB>) -> Router {
    Router::new()
        .route(
            "/orders",
            methods(
                "GET, POST",
                get(list_orders::<DB>).merge(DB::create_order()),
            ),
        )
        .route("/orders/{id}", methods("GET", get(get_order::<DB>)))
        .route("/health", methods("GET", get(health::<DB>)))
        .layer(Extension(idem.pool().clone()))
        .layer(Extension(idem.clone()))
}

/// `router` for a database: the `POST /orders` handler stamped out for it.
pub(crate) trait OrderRoutes: Store {
    /// `POST /orders`.
    fn create_order() -> MethodRouter;
}

/// `POST /orders`: creates an order: 201 with the order and its `Location`, or 402 when
/// the card is declined. Both outcomes are stored and replayed for the key. The body is
/// the last extractor, as axum requires; it reads the test hooks after the body, as the
/// actix binary's extractors do, so a request wrong in both is answered alike.
macro_rules! order_handlers {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::*;

            #[idem::axum::idempotent(scope = account, retention = "24h")]
            pub(crate) async fn create_order(
                account: Account,
                tx: idem::Tx<'_, $db>,
                request: OrderRequest,
            ) -> Result<Response, AppError> {
                let OrderRequest { order, hooks } = request;
                let created = place_order::<$db>(&mut tx, account, &order, &hooks).await?;
                Ok(created_at(format!("/orders/{}", created.id), &created))
            }
        }

        impl OrderRoutes for $db {
            fn create_order() -> MethodRouter {
                axum::routing::post($module::create_order)
            }
        }
    };
}

order_handlers!(on_postgres, Postgres);
order_handlers!(on_sqlite, Sqlite);

/// A 201 with `Location` and the value as JSON.
pub(crate) fn created_at(location: String, value: &impl Serialize) -> Response {
    (
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(value),
    )
        .into_response()
}

/// `GET /orders`: the caller's orders, oldest first.
async fn list_orders<DB: Store>(
    account: Account,
    Extension(pool): Extension<Pool<DB>>,
) -> Result<Response, AppError> {
    let orders = DB::list_orders(&pool, account.id()).await?;
    Ok(Json(orders).into_response())
}

/// `GET /orders/{id}`: one of the caller's orders; another account's order, and an id
/// that is not a number, are as absent as a missing one.
async fn get_order<DB: Store>(
    account: Account,
    OrderId(id): OrderId,
    Extension(pool): Extension<Pool<DB>>,
) -> Result<Response, AppError> {
    DB::get_order(&pool, id, account.id())
        .await?
        .map(|order| Json(order).into_response())
        .ok_or(AppError::NotFound)
}

/// 200 while a pooled connection answers a ping within [`HEALTH_TIMEOUT`], else 503
/// `database-unavailable`: what a load balancer or orchestrator polls.
async fn health<DB: Store>(Extension(pool): Extension<Pool<DB>>) -> Result<Response, AppError> {
    let ping = async {
        let mut conn = pool.acquire().await?;
        conn.ping().await
    };
    match tokio::time::timeout(HEALTH_TIMEOUT, ping).await {
        Ok(Ok(())) => Ok(Json(serde_json::json!({ "status": "ok" })).into_response()),
        Ok(Err(error)) => Err(AppError::Unavailable(error.to_string())),
        Err(_) => Err(AppError::Unavailable(format!(
            "the database did not answer within {HEALTH_TIMEOUT:?}"
        ))),
    }
}

/// One path's methods; any other method (`HEAD` included, which axum would otherwise
/// give to `GET`) is answered 405 `method-not-allowed` with `Allow: allow` (RFC 9110,
/// section 15.5.6), as the actix binary's `resource` does.
pub(crate) fn methods<S>(allow: &'static str, router: MethodRouter<S>) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    let refuse = move || async move { AppError::MethodNotAllowed(allow.to_owned()) };
    router.head(refuse).fallback(refuse)
}

/// A problem as axum's response.
pub(crate) fn problem_response(problem: Problem) -> Response {
    let status = StatusCode::from_u16(problem.status).expect("a problem's status is valid");
    let mut response = (status, problem.body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    if let Some(allow) = problem.allow {
        let allow = HeaderValue::from_str(&allow).expect("method names are header text");
        headers.insert(header::ALLOW, allow);
    }
    response
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        problem_response(self.problem())
    }
}

impl IntoResponse for PaymentError {
    fn into_response(self) -> Response {
        match self.problem() {
            Ok(problem) => problem_response(problem),
            // idem's own answer for a phase it could not run or record.
            Err(_) => match self {
                Self::Phase(error) => error.into_response(),
                _ => unreachable!("only a phase error has idem's answer"),
            },
        }
    }
}
