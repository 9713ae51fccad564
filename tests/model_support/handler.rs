//! The handler under test, on either framework: two phases, told by a header how this
//! attempt ends, and the control a dying attempt signals the test through.

use std::convert::Infallible;
use std::sync::Arc;

use actix_web::{HttpRequest, web};
use axum::http::HeaderMap;
use axum::{Extension, Json, Router};
use futures_util::future::{Either, LocalBoxFuture, select};
use serde::Deserialize;
use tokio::sync::Notify;

use super::steps::Outcome;
use super::store::ModelStore;
use crate::phased_support::Answer;
use crate::support::Reply;
use crate::support::app::Account;

/// Where a dying handler stops: it tells the test, then never finishes. The test drops
/// the request, as a process that dies drops everything it had in memory.
#[derive(Debug, Default)]
pub(crate) struct Control {
    pub(crate) dying: Notify,
}

impl Control {
    pub(crate) async fn die(&self) -> Infallible {
        self.dying.notify_one();
        std::future::pending().await
    }

    /// Awaits `call`, or drops it when its handler dies first: `None` then, the request
    /// gone as a dying process loses everything it had in memory.
    pub(crate) async fn unless_dying(&self, call: LocalBoxFuture<'static, Reply>) -> Option<Reply> {
        match select(call, Box::pin(self.dying.notified())).await {
            // It answered without the handler dying: a replay, a problem or its answer.
            Either::Left((reply, _)) => Some(reply),
            Either::Right(((), call)) => {
                drop(call);
                None
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct OpBody {
    tag: String,
    variant: u8,
}

/// Two phases, each recording an effect with the operation's derived key; `b` also
/// writes an outbox message. The answer names the scope, so a replay to another scope
/// would show. Written once; [`operation`] and the axum twins ([`axum_route`]) call it.
async fn run_operation<DB: ModelStore>(
    scope: i64,
    phases: &mut idem::Phases<DB>,
    body: &OpBody,
    outcome: Outcome,
    control: &Control,
) -> Result<Answer, idem::phased::PhaseError> {
    let derived = phases.derived_key("charge");
    if outcome == Outcome::DiesBeforeA {
        match control.die().await {}
    }
    let a: String = phases
        .run("a", async |mut tx| {
            DB::effect(&mut tx, scope, &body.tag, "a", &derived).await?;
            Ok::<_, idem::phased::PhaseError>(derived.clone())
        })
        .await?;
    // Lets concurrent duplicates interleave between the phases.
    tokio::task::yield_now().await;
    match outcome {
        Outcome::Declined => {
            return Ok(Answer::text(402, format!("declined {scope}")));
        }
        Outcome::Fails => return Ok(Answer::text(503, "try later")),
        Outcome::Panics => panic!("the model's handler panics after phase a"),
        Outcome::DiesAfterA => match control.die().await {},
        _ => {}
    }
    let b: String = phases
        .run("b", async |mut tx| {
            DB::effect(&mut tx, scope, &body.tag, "b", &derived).await?;
            let payload =
                serde_json::json!({ "scope": scope, "tag": body.tag, "derived": derived });
            tx.enqueue("model", &payload).await?;
            Ok::<_, idem::phased::PhaseError>(derived.clone())
        })
        .await?;
    if outcome == Outcome::DiesAfterB {
        match control.die().await {}
    }
    Ok(Answer::json(
        201,
        &serde_json::json!({
            "scope": scope, "tag": body.tag, "variant": body.variant, "a": a, "b": b,
        }),
    ))
}

/// `POST /model/op` on actix-web.
#[idem::idempotent(scope = account, lease = "30s")]
pub(crate) async fn operation<DB: ModelStore>(
    account: Account,
    phases: idem::Phases<DB>,
    body: web::Json<OpBody>,
    req: HttpRequest,
    control: web::Data<Control>,
) -> Result<Answer, idem::phased::PhaseError> {
    let outcome = Outcome::from_header(req.headers().get("x-outcome").map(|v| v.as_bytes()));
    run_operation(account.id(), &mut phases, &body, outcome, &control).await
}

/// `POST /model/op` on axum, once per database: idempotent axum handlers are not generic.
macro_rules! axum_route {
    ($module:ident, $db:ty) => {
        pub(crate) mod $module {
            use super::*;

            #[idem::axum::idempotent(scope = account, lease = "30s")]
            async fn operation(
                account: Account,
                phases: idem::Phases<$db>,
                headers: HeaderMap,
                Extension(control): Extension<Arc<Control>>,
                Json(body): Json<OpBody>,
            ) -> Result<Answer, idem::phased::PhaseError> {
                let outcome = Outcome::from_header(headers.get("x-outcome").map(|v| v.as_bytes()));
                run_operation(account.id(), &mut phases, &body, outcome, &control).await
            }

            /// The route, with `control`.
            pub(crate) fn route(control: Arc<Control>) -> Router {
                Router::new()
                    .route("/model/op", axum::routing::post(operation))
                    .layer(Extension(control))
            }
        }
    };
}

axum_route!(axum_on_postgres, sqlx::Postgres);
axum_route!(axum_on_sqlite, sqlx::Sqlite);
