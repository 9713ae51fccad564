// Keys in Redis on axum: `store = redis`, a lease and `idem::redis::Steps`; the handler
// routes like any axum handler.
use axum::{Json, Router, routing::post};

#[idem::axum::idempotent(scope = account, store = redis, lease = "30s")]
async fn send_notification(
    account: axum::Extension<i64>,
    steps: idem::redis::Steps,
    Json(body): Json<serde_json::Value>,
) -> Result<&'static str, idem::phased::PhaseError> {
    let key = steps.derived_key("send");
    let _: String = steps
        .run("sent", async || {
            let _ = (&account, &body);
            Ok::<_, idem::phased::PhaseError>(key.clone())
        })
        .await?;
    Ok("sent")
}

fn main() {
    let _: Router = Router::new().route("/notifications", post(send_notification));
}
