use actix_web::web;

#[actix_web::post("/webhooks/standard")]
#[idem::idempotent(scope = sender, key = header("Webhook-Id"), retention = "5d")]
async fn standard(sender: idem::SignedWebhook, tx: idem::Tx<'_, sqlx::Postgres>) -> &'static str {
    let _ = (sender, tx);
    "received"
}

#[actix_web::post("/webhooks/stripe")]
#[idem::idempotent(scope = sender, key = json("/data/object/id"))]
async fn stripe(
    sender: idem::SignedWebhook,
    tx: idem::Tx<'_, sqlx::Sqlite>,
    event: web::Json<serde_json::Value>,
) -> &'static str {
    let _ = (sender, tx, event);
    "received"
}

fn main() {
    let _ = actix_web::App::new().service(standard).service(stripe);
}
