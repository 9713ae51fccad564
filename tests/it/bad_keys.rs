//! A missing key or any malformed key is a 400 problem, and nothing reaches the database:
//! no key row, no order.

use crate::support;

use support::{
    ALICE, Env, Reply, TestApp, TestBackend, order_json, post_order, post_raw_key, post_unkeyed,
};

async fn send_raw(app: &TestApp, key: &[u8]) -> Reply {
    app.call(post_raw_key(
        "/orders",
        ALICE,
        key,
        &order_json("tea", 1, 100),
    ))
    .await
}

async fn a_missing_key_is_400_key_missing<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let reply = app
        .call(post_unkeyed("/orders", ALICE, &order_json("tea", 1, 100)))
        .await;
    let problem = reply.assert_idem_problem(400, "idempotency-key-missing");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("Idempotency-Key"))
    );
    assert_eq!(env.keys().await, 0);
    assert_eq!(env.orders().await, 0);
}

async fn every_malformed_key_is_400_key_invalid_and_stores_nothing<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let too_long = "k".repeat(256);
    let too_long_quoted = format!("\"{too_long}\"");
    let cases: [(&str, &[u8]); 13] = [
        ("empty", b""),
        ("only spaces", b"   "),
        ("256 characters", too_long.as_bytes()),
        ("256 characters, quoted", too_long_quoted.as_bytes()),
        ("a tab inside", b"ab\tc"),
        ("non-ASCII", "caf\u{e9}".as_bytes()),
        ("a raw high byte", b"ab\xffc"),
        ("a space inside", b"a b"),
        ("empty quoted", b"\"\""),
        ("unterminated quote", b"\"abc"),
        ("quote inside quotes", b"\"a\"b\""),
        ("sf parameters", b"\"abc\";p=1"),
        ("bad escape", b"\"a\\nb\""),
    ];
    for (what, key) in cases {
        let reply = send_raw(&app, key).await;
        assert_eq!(
            reply.status,
            400,
            "{what}: {:?}",
            String::from_utf8_lossy(&reply.body)
        );
        let problem = reply.assert_idem_problem(400, "idempotency-key-invalid");
        assert!(
            problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{what}"
        );
    }

    let twice = post_order(ALICE, "first", &order_json("tea", 1, 100))
        .append_header(("idempotency-key", "second"));
    app.call(twice)
        .await
        .assert_idem_problem(400, "idempotency-key-invalid");
    let twice_same = post_order(ALICE, "same", &order_json("tea", 1, 100))
        .append_header(("idempotency-key", "same"));
    app.call(twice_same)
        .await
        .assert_idem_problem(400, "idempotency-key-invalid");

    assert_eq!(env.keys().await, 0, "no key row for a refused key");
    assert_eq!(env.orders().await, 0, "the handler never ran");
}

async fn a_255_character_key_is_accepted_in_either_form<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let key = "k".repeat(255);

    let first = send_raw(&app, key.as_bytes()).await;
    first.assert_created();
    let quoted = send_raw(&app, format!("\"{key}\"").as_bytes()).await;
    quoted.assert_replay_of(&first);

    assert_eq!(env.orders().await, 1);
    let rows = env.key_rows().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].1, key, "stored as sent, unquoted");
}

support::backend_tests!(
    a_missing_key_is_400_key_missing,
    every_malformed_key_is_400_key_invalid_and_stores_nothing,
    a_255_character_key_is_accepted_in_either_form,
);
