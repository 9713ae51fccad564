//! A webhook receiver on axum: `SignedWebhook` reads the head (and the body idem
//! buffered), so it comes before the body's extractor, as in the actix-web form.
use axum::routing::post;
use axum::{Extension, Json, Router};

#[idem::axum::idempotent(scope = sender, key = header("webhook-id"), retention = "5d")]
async fn provider_event(
    sender: idem::SignedWebhook,
    tx: idem::Tx<'_, sqlx::Sqlite>,
    Json(event): Json<serde_json::Value>,
) -> String {
    let _ = &mut *tx;
    format!("{} {}", sender.sender(), event["id"])
}

fn main() {
    let verifier =
        idem::WebhookVerifier::new("provider", "ZG9jLWV4YW1wbGUtc2VjcmV0LTIwMjY=").unwrap();
    let _: Router = Router::new().route(
        "/webhooks/provider",
        post(provider_event).route_layer(Extension(verifier)),
    );
}
