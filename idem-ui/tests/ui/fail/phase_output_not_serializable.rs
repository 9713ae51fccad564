// A phase's output is recorded for takeovers, so it must serialize and deserialize.
struct Charge {
    id: i64,
}

#[actix_web::post("/accounts/{account}/payments")]
#[idem::idempotent(scope = account, lease = "30s")]
async fn create_payment(
    account: actix_web::web::ReqData<i64>,
    phases: idem::Phases<sqlx::Postgres>,
) -> actix_web::Result<String> {
    let _ = account;
    let charge = phases
        .run("charged", async |_tx| {
            Ok::<_, actix_web::Error>(Charge { id: 7 })
        })
        .await?;
    Ok(charge.id.to_string())
}

fn main() {}
