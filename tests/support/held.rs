//! `POST /test/held`: inserts an order, then holds its key (and, on SQLite, the
//! database's write lock) until the test opens the gate, so a test can send other
//! requests while it is in flight and assert what they were answered, in order.

use std::sync::Arc;

use actix_web::{HttpResponse, web};
use axum::http::StatusCode;
use axum::{Extension, Json, Router};
use tokio::sync::Notify;

use super::app::{Account, AppError, NewOrder, Store};
use super::{TestApp, TestBackend, by_database};

/// Where the held request waits, and how it tells the test that it got there.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    reached: Notify,
    open: Notify,
}

impl Gate {
    /// In the test: wait until the held request has claimed its key and written.
    pub(crate) async fn reached(&self) {
        self.reached.notified().await;
    }

    /// In the test: let the held request go on to commit.
    pub(crate) fn open(&self) {
        self.open.notify_one();
    }
}

#[idem::idempotent(scope = account)]
async fn held<DB: Store>(
    account: Account,
    tx: idem::Tx<'_, DB>,
    order: web::Json<NewOrder>,
    gate: web::Data<Gate>,
) -> Result<HttpResponse, AppError> {
    DB::insert_order(&mut tx, account.id(), &order).await?;
    gate.reached.notify_one();
    gate.open.notified().await;
    Ok(HttpResponse::Created().body("held"))
}

/// The same handler on axum, once per database: idempotent axum handlers are not generic.
macro_rules! axum_held {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::*;

            #[idem::axum::idempotent(scope = account)]
            pub(super) async fn held(
                account: Account,
                Extension(gate): Extension<Arc<Gate>>,
                tx: idem::Tx<'_, $db>,
                Json(order): Json<NewOrder>,
            ) -> Result<(StatusCode, &'static str), StatusCode> {
                <$db as Store>::insert_order(&mut tx, account.id(), &order)
                    .await
                    .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
                gate.reached.notify_one();
                gate.open.notified().await;
                Ok((StatusCode::CREATED, "held"))
            }
        }
    };
}

axum_held!(on_postgres, sqlx::Postgres);
axum_held!(on_sqlite, sqlx::Sqlite);

/// The example's application plus `POST /test/held`, with `idem` and `gate`, on the
/// test's framework.
pub(crate) async fn app<DB: TestBackend>(idem: &idem::Idem<DB>, gate: &web::Data<Gate>) -> TestApp {
    let actix_gate = gate.clone();
    let axum_gate = gate.clone().into_inner();
    super::service_with_twin(
        idem,
        move |cfg| {
            cfg.app_data(actix_gate)
                .route("/test/held", web::post().to(held::<DB>));
        },
        move || {
            let held = by_database::<DB, _>(
                || axum::routing::post(on_postgres::held),
                || axum::routing::post(on_sqlite::held),
            );
            Router::new()
                .route("/test/held", held)
                .layer(Extension(axum_gate))
        },
    )
    .await
}
