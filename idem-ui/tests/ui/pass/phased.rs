// The phased form: a lease, `idem::Phases<sqlx::Postgres>`, phases with their own transactions, a derived
// key, a lease extension and an outbox message.
use actix_web::{App, HttpResponse, post, web};
use idem::idempotent;

#[derive(serde::Serialize, serde::Deserialize)]
struct Payment {
    id: i64,
}

#[post("/accounts/{account}/payments")]
#[idempotent(scope = account, retention = "24h", lease = "30s")]
async fn create_payment(
    account: web::ReqData<i64>,
    phases: idem::Phases<sqlx::Postgres>,
    body: web::Json<serde_json::Value>,
) -> actix_web::Result<HttpResponse> {
    let payment: Payment = phases
        .run("payment_created", async |mut tx| {
            let id =
                sqlx::query_scalar("INSERT INTO payments (account_id) VALUES ($1) RETURNING id")
                    .bind(*account)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(actix_web::error::ErrorInternalServerError)?;
            Ok::<_, actix_web::Error>(Payment { id })
        })
        .await?;
    let provider_key = phases.derived_key("charge");
    let lease = phases.lease();
    phases
        .run(
            "charged",
            async |mut tx| -> Result<(), idem::phased::PhaseError> {
                lease.extend().await?;
                let _ = (&provider_key, &body);
                tx.enqueue("receipts", &serde_json::json!({ "payment": payment.id }))
                    .await?;
                Ok(())
            },
        )
        .await?;
    Ok(HttpResponse::Created().json(payment))
}

fn main() {
    let _ = App::new().service(create_payment);
}
