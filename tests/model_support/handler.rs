//! The handler under test: two phases, told by a header how this attempt ends, and the
//! control a dying attempt signals the test through.

use std::convert::Infallible;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use tokio::sync::Notify;

use super::steps::Outcome;
use super::store::ModelStore;
use crate::support::app::Account;

/// Where a dying handler stops: it tells the test, then never finishes. The test drops
/// the request, as a process that dies drops everything it had in memory.
#[derive(Debug, Default)]
pub(crate) struct Control {
    pub(crate) dying: Notify,
}

impl Control {
    async fn die(&self) -> Infallible {
        self.dying.notify_one();
        std::future::pending().await
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct OpBody {
    tag: String,
    variant: u8,
}

/// Two phases, each recording an effect with the operation's derived key; `b` also
/// writes an outbox message. The answer names the scope, so a replay to another scope
/// would show.
#[idem::idempotent(scope = account, lease = "30s")]
pub(crate) async fn operation<DB: ModelStore>(
    account: Account,
    phases: idem::Phases<DB>,
    body: web::Json<OpBody>,
    req: HttpRequest,
    control: web::Data<Control>,
) -> Result<HttpResponse, idem::PhaseError> {
    let outcome = Outcome::from_header(&req);
    let scope = account.id();
    let derived = phases.derived_key("charge");
    if outcome == Outcome::DiesBeforeA {
        match control.die().await {}
    }
    let a: String = phases
        .run("a", async |mut tx| {
            DB::effect(&mut tx, scope, &body.tag, "a", &derived).await?;
            Ok::<_, idem::PhaseError>(derived.clone())
        })
        .await?;
    // Lets concurrent duplicates interleave between the phases.
    tokio::task::yield_now().await;
    match outcome {
        Outcome::Declined => {
            return Ok(HttpResponse::PaymentRequired().body(format!("declined {scope}")));
        }
        Outcome::Fails => return Ok(HttpResponse::ServiceUnavailable().body("try later")),
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
            Ok::<_, idem::PhaseError>(derived.clone())
        })
        .await?;
    if outcome == Outcome::DiesAfterB {
        match control.die().await {}
    }
    Ok(HttpResponse::Created().json(serde_json::json!({
        "scope": scope, "tag": body.tag, "variant": body.variant, "a": a, "b": b,
    })))
}
