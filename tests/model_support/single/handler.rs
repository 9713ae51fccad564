//! The single-transaction handler under test, on either framework: it writes an effect
//! through `idem::Tx` under a name of its own, then ends as a header tells it. Its answer
//! names the effect, so the model can tell which write each stored answer committed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use actix_web::{HttpRequest, web};
use axum::http::HeaderMap;
use axum::{Extension, Json, Router};
use serde::Deserialize;

use super::Outcome;
use crate::model_support::handler::Control;
use crate::model_support::store::ModelStore;
use crate::phased_support::Answer;
use crate::support::app::{Account, AppError};

/// Names every attempt's effect apart, across the sequences of one test process.
static NEXT_EFFECT: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Deserialize)]
pub(crate) struct OpBody {
    tag: String,
    variant: u8,
}

/// The handler's work, written once; [`operation`] and the axum twins call it.
async fn run_operation<DB: ModelStore>(
    scope: i64,
    conn: &mut DB::Connection,
    body: &OpBody,
    outcome: Outcome,
    control: &Control,
) -> Result<Answer, AppError> {
    let effect = format!("e{}", NEXT_EFFECT.fetch_add(1, Ordering::Relaxed));
    DB::effect(conn, scope, &body.tag, "single", &effect).await?;
    // Lets concurrent copies reach their claims while this one holds the key.
    tokio::task::yield_now().await;
    let Some(status) = outcome.status() else {
        if outcome == Outcome::Panics {
            panic!("the model's handler panics after its write");
        }
        match control.die().await {}
    };
    let mut answer = serde_json::json!({
        "scope": scope, "tag": body.tag, "variant": body.variant, "effect": effect,
    });
    if outcome == Outcome::CreatedLarge {
        // Over the 64 KiB above which PostgreSQL stages the body with `COPY`.
        answer["pad"] = "large answer ".repeat(6_000).into();
    }
    Ok(Answer::json(status, &answer))
}

/// `POST /model/single` on actix-web.
#[idem::idempotent(scope = account)]
pub(crate) async fn operation<DB: ModelStore>(
    account: Account,
    tx: idem::Tx<'_, DB>,
    body: web::Json<OpBody>,
    req: HttpRequest,
    control: web::Data<Control>,
) -> Result<Answer, AppError> {
    let outcome = Outcome::from_header(req.headers().get("x-outcome").map(|v| v.as_bytes()));
    run_operation::<DB>(account.id(), &mut tx, &body, outcome, &control).await
}

/// `POST /model/single` on axum, once per database: idempotent axum handlers are not
/// generic.
macro_rules! axum_route {
    ($module:ident, $db:ty) => {
        pub(crate) mod $module {
            use super::*;

            #[idem::axum::idempotent(scope = account)]
            async fn operation(
                account: Account,
                tx: idem::Tx<'_, $db>,
                headers: HeaderMap,
                Extension(control): Extension<Arc<Control>>,
                Json(body): Json<OpBody>,
            ) -> Result<Answer, AppError> {
                let outcome = Outcome::from_header(headers.get("x-outcome").map(|v| v.as_bytes()));
                run_operation::<$db>(account.id(), &mut tx, &body, outcome, &control).await
            }

            /// The route, with `control`.
            pub(crate) fn route(control: Arc<Control>) -> Router {
                Router::new()
                    .route("/model/single", axum::routing::post(operation))
                    .layer(Extension(control))
            }
        }
    };
}

axum_route!(axum_on_postgres, sqlx::Postgres);
axum_route!(axum_on_sqlite, sqlx::Sqlite);
