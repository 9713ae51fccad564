// `SignedWebhook` reads the body to verify it, so on axum it is the last extractor.
#[idem::axum::idempotent(scope = account, backend = sqlx::Postgres)]
async fn receive(
    event: idem::SignedWebhook,
    account: axum::Extension<i64>,
) -> String {
    let _ = event;
    account.0.to_string()
}

fn main() {}
