//! A phased handler's registry entry carries its lease, so an operator listing the
//! policies sees how long a crashed attempt blocks its key.

use actix_web::{HttpResponse, post, web};

// Above the route attribute, so the registry also records the route.
#[idem::idempotent(scope = account, retention = "48h", lease = "2500ms")]
#[post("/test/payments/{account}")]
async fn pay(
    account: web::ReqData<i64>,
    phases: idem::Phases<sqlx::Postgres>,
) -> actix_web::Result<HttpResponse> {
    let account = *account;
    let paid = phases
        .run("paid", async |_tx| Ok::<_, actix_web::Error>(account))
        .await?;
    Ok(HttpResponse::Created().body(paid.to_string()))
}

#[post("/test/orders/{account}")]
#[idem::idempotent(scope = account)]
async fn order(account: web::ReqData<i64>, _tx: idem::Tx<'_, sqlx::Postgres>) -> HttpResponse {
    HttpResponse::Created().body(account.to_string())
}

#[test]
fn phased_policies_carry_their_lease_and_others_none() {
    // Referenced so the linker keeps both handlers.
    let _ = (pay, order);
    let find = |name: &str| {
        idem::policies()
            .into_iter()
            .find(|policy| policy.handler() == name)
            .unwrap_or_else(|| panic!("{name} is registered"))
    };
    let phased = find("pay");
    assert_eq!(phased.lease(), Some(std::time::Duration::from_millis(2500)));
    assert_eq!(
        phased.retention(),
        std::time::Duration::from_secs(48 * 3600)
    );
    assert_eq!(phased.route(), Some(("POST", "/test/payments/{account}")));
    assert_eq!(find("order").lease(), None);
}
