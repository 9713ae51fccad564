//! A request the handler's extractors refuse (its body, its query, its caller) gets their
//! error response before the key is claimed: nothing is stored, and the key stays free
//! for a corrected request.

use crate::support;

use support::{ALICE, Env, Reply, TestBackend, order_json, post, post_order};

/// After a refused request, the same key with a valid body runs the handler.
async fn assert_key_unused<DB: TestBackend>(env: &Env<DB>, app: &support::TestApp, key: &str) {
    assert_eq!(env.keys().await, 0, "no key row after a refused body");
    assert_eq!(env.orders().await, 0);
    let ok = app
        .call(post_order(ALICE, key, &order_json("tea", 1, 100)))
        .await;
    ok.assert_created();
    assert_eq!(env.orders().await, 1);
}

async fn malformed_json_is_400_and_the_key_stays_unused<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;

    for body in [r#"{"item": "tea", "quantity": "#, "not json", "", "{]"] {
        let reply: Reply = app.call(post_order(ALICE, "k", body)).await;
        let problem = reply.assert_app_problem(400, "malformed-body");
        assert!(
            problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{body:?}"
        );
        assert!(!reply.replayed());
    }
    assert_key_unused(&env, &app, "k").await;
}

async fn an_invalid_order_is_422_and_the_key_stays_unused<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;

    for (body, says) in [
        (
            r#"{"item":"tea","quantity":0,"amount_cents":100}"#,
            "quantity must be at least 1",
        ),
        (
            r#"{"item":"tea","quantity":1,"amount_cents":-1}"#,
            "amount_cents must not be negative",
        ),
        (
            r#"{"item":"tea","amount_cents":100}"#,
            "missing field `quantity`",
        ),
        (
            r#"{"item":"tea","quantity":"1","amount_cents":100}"#,
            "invalid type",
        ),
        (
            r#"{"item":"tea","quantity":3000000000,"amount_cents":100}"#,
            "invalid value",
        ),
    ] {
        let reply = app.call(post_order(ALICE, "k", body)).await;
        let problem = reply.assert_app_problem(422, "invalid-order");
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(says), "{body}: {detail}");
    }
    assert_key_unused(&env, &app, "k").await;
}

async fn a_body_not_sent_as_json_is_415_and_the_key_stays_unused<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let req = post_order(ALICE, "k", &order_json("tea", 1, 100))
        .insert_header(("content-type", "text/plain"));
    app.call(req)
        .await
        .assert_app_problem(415, "unsupported-media-type");
    assert_key_unused(&env, &app, "k").await;
}

async fn a_bad_test_hook_is_400_and_the_key_stays_unused<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    for uri in [
        "/orders?delay_ms=5001",
        "/orders?delay_ms=-1",
        "/orders?fail=503",
        "/orders?x=1",
    ] {
        let reply = app
            .call(post(uri, ALICE, "k", &order_json("tea", 1, 100)))
            .await;
        reply.assert_app_problem(400, "invalid-query");
    }
    assert_key_unused(&env, &app, "k").await;
}

async fn a_missing_account_is_401_and_the_key_stays_unused<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    for account in [
        None,
        Some("0"),
        Some("-5"),
        Some("abc"),
        Some("9223372036854775808"),
    ] {
        let mut req = support::TestRequest::post()
            .uri("/orders")
            .insert_header(("idempotency-key", "k"))
            .insert_header(("content-type", "application/json"))
            .set_payload(order_json("tea", 1, 100));
        if let Some(account) = account {
            req = req.insert_header(("x-account-id", account));
        }
        app.call(req)
            .await
            .assert_app_problem(401, "unauthenticated");
    }
    assert_key_unused(&env, &app, "k").await;
}

support::backend_tests!(
    malformed_json_is_400_and_the_key_stays_unused,
    an_invalid_order_is_422_and_the_key_stays_unused,
    a_body_not_sent_as_json_is_415_and_the_key_stays_unused,
    a_bad_test_hook_is_400_and_the_key_stays_unused,
    a_missing_account_is_401_and_the_key_stays_unused,
);
