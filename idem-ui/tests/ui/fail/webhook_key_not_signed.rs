// A signed webhook's key must be what the sender signed: neither `Idempotency-Key` nor
// another header is.
#[actix_web::post("/webhooks/provider")]
#[idem::idempotent(scope = sender)]
async fn receive(sender: idem::SignedWebhook, tx: idem::Tx<'_, sqlx::Postgres>) -> &'static str {
    let _ = (sender, tx);
    "received"
}

#[actix_web::post("/webhooks/other")]
#[idem::idempotent(scope = sender, key = header("x-event-id"))]
async fn receive_other(sender: idem::SignedWebhook, tx: idem::Tx<'_, sqlx::Postgres>) -> &'static str {
    let _ = (sender, tx);
    "received"
}

// The signed id and a field of the signed body are accepted.
#[actix_web::post("/webhooks/signed")]
#[idem::idempotent(scope = sender, key = header("Webhook-Id"))]
async fn receive_signed(sender: idem::SignedWebhook, tx: idem::Tx<'_, sqlx::Postgres>) -> &'static str {
    let _ = (sender, tx);
    "received"
}

#[actix_web::post("/webhooks/body")]
#[idem::idempotent(scope = sender, key = json("/data/id"))]
async fn receive_body(sender: idem::SignedWebhook, tx: idem::Tx<'_, sqlx::Postgres>) -> &'static str {
    let _ = (sender, tx);
    "received"
}

fn main() {}
