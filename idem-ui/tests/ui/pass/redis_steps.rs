// Keys in Redis: `store = redis`, a lease, `idem::redis::Steps` with a derived key, a
// recorded step, the recovery point and a lease extension; no transaction anywhere.
use actix_web::{App, HttpResponse, post, web};
use idem::idempotent;

#[derive(serde::Serialize, serde::Deserialize)]
struct Sent {
    message_id: String,
}

#[post("/notifications")]
#[idempotent(scope = account, store = redis, retention = "24h", lease = "30s")]
async fn send_notification(
    account: web::ReqData<i64>,
    steps: idem::redis::Steps,
    body: web::Json<serde_json::Value>,
) -> actix_web::Result<HttpResponse> {
    let provider_key = steps.derived_key("send");
    let resumed = steps.recovery_point().is_some();
    steps.extend_lease().await?;
    let sent: Sent = steps
        .run("sent", async || {
            let _ = (&account, &body);
            Ok::<_, actix_web::Error>(Sent {
                message_id: provider_key.clone(),
            })
        })
        .await?;
    let _ = resumed;
    Ok(HttpResponse::Created().json(sent))
}

fn main() {
    let _ = App::new().service(send_notification);
}
