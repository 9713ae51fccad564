//! The axum rows: the scenarios `bare`, `hand` and `idem` as axum 0.8 handlers, served by
//! the same `idem-bench serve` process as the actix-web ones, on the same pool and with
//! the same SQL, so that `axum idem / actix idem` compares the two adapters and nothing
//! else.
//!
//! axum runs the way actix-web does here: one thread per core, each with its own
//! single-threaded runtime, all accepting on one listening socket.

use std::net::SocketAddr;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json, Router};
use sqlx::{Pool, Postgres, Sqlite};

use crate::hand::{self, Answer};
use crate::orders::{ACCOUNT_HEADER, Account, Order};

/// `X-Account-Id` as axum's extractor; the same 401 as the actix-web one without it.
impl<S: Send + Sync> FromRequestParts<S> for Account {
    type Rejection = (StatusCode, &'static str);

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .headers
            .get(ACCOUNT_HEADER)
            .and_then(|value| value.to_str().ok()?.parse::<i64>().ok())
            .filter(|&id| id > 0)
            .map(Account)
            .ok_or((StatusCode::UNAUTHORIZED, "send X-Account-Id"))
    }
}

/// The example's answer in axum's terms: 201, `Location`, the order as JSON.
fn created(order: &Order) -> Response {
    let location = [(header::LOCATION, format!("/orders/{}", order.id))];
    (StatusCode::CREATED, location, Json(order)).into_response()
}

/// A database error as a 500, as `orders::internal` answers it for actix-web.
fn internal(error: sqlx::Error) -> (StatusCode, String) {
    (StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
}

/// The hand-written baseline's answer as axum's response, the same bytes as
/// `hand::render` gives actix-web.
fn render(answer: Answer) -> Response {
    let (status, headers, body) = answer.into_parts();
    let mut response = (status_code(status), body).into_response();
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response
                .headers_mut()
                .insert(header::HeaderName::from_static(name), value);
        }
    }
    response
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The same handlers for each database: an axum handler made idempotent is not generic,
/// and the others need a concrete database to be `Send`.
macro_rules! axum_handlers {
    ($module:ident, $db:ty) => {
        mod $module {
            use axum::extract::State;
            use axum::http::{HeaderMap, Method, StatusCode, Uri};
            use axum::response::Response;
            use axum::routing::post;
            use axum::{Json, Router};
            use bytes::Bytes;
            use sqlx::Pool;

            use crate::hand;
            use crate::orders::{Account, NewOrder, OrderStore as _};
            use crate::server_axum::{created, internal, render};

            /// `POST /bare/orders`: the example's insert, no idempotency.
            pub(super) async fn bare(
                account: Account,
                State(pool): State<Pool<$db>>,
                Json(order): Json<NewOrder>,
            ) -> Result<Response, (StatusCode, String)> {
                let mut conn = pool.acquire().await.map_err(internal)?;
                let inserted = <$db>::insert_order(&mut conn, account, &order)
                    .await
                    .map_err(internal)?;
                Ok(created(&inserted))
            }

            /// `POST /hand/orders`: the seed's protocol written by hand, `hand.rs`'s SQL.
            pub(super) async fn hand(
                account: Account,
                State(pool): State<Pool<$db>>,
                method: Method,
                uri: Uri,
                headers: HeaderMap,
                body: Bytes,
            ) -> Response {
                let key = hand::idempotency_key(
                    headers
                        .get_all("idempotency-key")
                        .iter()
                        .map(|v| v.as_bytes()),
                );
                let path = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str());
                let answer = hand::answer(&pool, account, key, method.as_str(), path, &body).await;
                render(answer)
            }

            /// `POST /idem/orders`: `#[idem::axum::idempotent]` around the same insert.
            #[idem::axum::idempotent(scope = account, retention = "24h")]
            pub(super) async fn with_idem(
                account: Account,
                tx: idem::Tx<'_, $db>,
                Json(order): Json<NewOrder>,
            ) -> Result<Response, (StatusCode, String)> {
                let inserted = <$db>::insert_order(&mut tx, account, &order)
                    .await
                    .map_err(internal)?;
                Ok(created(&inserted))
            }

            pub(super) fn routes() -> Router<Pool<$db>> {
                Router::new()
                    .route("/bare/orders", post(bare))
                    .route("/hand/orders", post(hand))
                    .route("/idem/orders", post(with_idem))
            }
        }
    };
}

axum_handlers!(on_postgres, sqlx::Postgres);
axum_handlers!(on_sqlite, sqlx::Sqlite);

/// A database the axum rows run on.
pub(crate) trait AxumRoutes: hand::Hand {
    fn routes() -> Router<Pool<Self>>;
}

impl AxumRoutes for Postgres {
    fn routes() -> Router<Pool<Self>> {
        on_postgres::routes()
    }
}

impl AxumRoutes for Sqlite {
    fn routes() -> Router<Pool<Self>> {
        on_sqlite::routes()
    }
}

/// Starts the axum server on a free port of 127.0.0.1 on a multi-threaded tokio runtime of
/// `threads` workers (what `#[tokio::main]` gives an axum service), and returns its
/// address. The runtime runs until the process exits.
///
/// One runtime rather than one single-threaded runtime per thread on a shared listener:
/// with the latter, which thread accepts a connection is a race, and a run that put most
/// of the 16 connections on one thread measured one core's worth (axum's rows varied by
/// up to 2x between runs of the same binary).
pub(crate) fn start<DB: AxumRoutes>(
    pool: Pool<DB>,
    idem: idem::Idem<DB>,
    threads: usize,
) -> Result<SocketAddr, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let app = DB::routes().layer(Extension(idem)).with_state(pool);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .map_err(|e| format!("cannot build a tokio runtime for axum: {e}"))?;
    std::thread::spawn(move || {
        runtime.block_on(async move {
            let listener =
                tokio::net::TcpListener::from_std(listener).expect("the listening socket");
            if let Err(error) = axum::serve(listener, app).await {
                eprintln!("idem-bench serve: axum failed: {error}");
            }
        });
    });
    Ok(addr)
}
