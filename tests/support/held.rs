//! `POST /test/held`: inserts an order, then holds its key (and, on SQLite, the
//! database's write lock) until the test opens the gate, so a test can send other
//! requests while it is in flight and assert what they were answered, in order.

use actix_web::{HttpResponse, web};
use tokio::sync::Notify;

use super::app::{Account, AppError, NewOrder, Store};
use super::{TestApp, TestBackend};

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

/// The example's application plus `POST /test/held`, with `idem` and `gate`.
pub(crate) async fn app<DB: TestBackend>(idem: &idem::Idem<DB>, gate: &web::Data<Gate>) -> TestApp {
    let gate = gate.clone();
    super::service_with(idem, move |cfg| {
        cfg.app_data(gate)
            .route("/test/held", web::post().to(held::<DB>));
    })
    .await
}
