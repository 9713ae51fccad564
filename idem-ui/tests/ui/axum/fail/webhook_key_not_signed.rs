// A signed webhook's key must be what the sender signed, in axum too.
#[idem::axum::idempotent(scope = sender)]
async fn receive(sender: idem::SignedWebhook, tx: idem::Tx<'_, sqlx::Postgres>) -> &'static str {
    let _ = (sender, tx);
    "received"
}

fn main() {}
