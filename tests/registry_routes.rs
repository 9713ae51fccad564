//! What the registry learns from the attribute: the scope's name from the parameter's
//! pattern (also when it is `mut`), and the method and path of the one route attribute,
//! below `#[idempotent]` or above it (the README's order, read back from this file); none
//! when the route registers several methods.

use actix_web::{HttpResponse, post, route, web};

#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
#[post("/accounts/{account}/orders")]
async fn create_order(mut account: idem::UnverifiedScope<web::Path<i64>>) -> HttpResponse {
    let _ = &mut account;
    HttpResponse::Created().finish()
}

#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
#[route("/accounts/{account}/payments", method = "POST")]
async fn create_payment(account: idem::UnverifiedScope<web::Path<i64>>) -> HttpResponse {
    let _ = account;
    HttpResponse::Created().finish()
}

#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
#[route("/accounts/{account}/profile", method = "PUT", method = "PATCH")]
async fn update_profile(account: idem::UnverifiedScope<web::Path<i64>>) -> HttpResponse {
    let _ = account;
    HttpResponse::NoContent().finish()
}

#[post("/accounts/{account}/refunds")]
#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
async fn create_refund(account: idem::UnverifiedScope<web::Path<i64>>) -> HttpResponse {
    let _ = account;
    HttpResponse::Created().finish()
}

#[test]
fn policies_carry_the_scope_name_and_the_single_route() {
    // Referenced so the linker keeps this file's handlers.
    let _ = (create_order, create_payment, update_profile, create_refund);
    let mut policies: Vec<_> = idem::policies()
        .into_iter()
        .map(|policy| (policy.handler(), policy.scope(), policy.route()))
        .collect();
    policies.sort();
    assert_eq!(
        policies,
        [
            (
                "create_order",
                "account",
                Some(("POST", "/accounts/{account}/orders"))
            ),
            (
                "create_payment",
                "account",
                Some(("POST", "/accounts/{account}/payments"))
            ),
            (
                "create_refund",
                "account",
                Some(("POST", "/accounts/{account}/refunds"))
            ),
            ("update_profile", "account", None),
        ]
    );
}
