#[actix_web::post("/webhooks/provider")]
#[idem::idempotent(scope = sender, key = header(webhook_id))]
async fn receive(sender: idem::SignedWebhook, tx: idem::Tx<'_, sqlx::Postgres>) -> &'static str {
    let _ = (sender, tx);
    "received"
}

fn main() {}
