//! Size limits: a request body over `max_request_bytes` is refused with 413 before
//! anything is stored; a response over `max_stored_bytes` cannot be replayed, so it is
//! not committed (500 `response-too-large`) and the key stays free.

use crate::support;

use support::{ALICE, Env, TestBackend, order_json, post_order};

async fn a_request_body_over_the_limit_is_413_and_stores_nothing<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let body = order_json("tea", 1, 100);
    let small = support::service(&env.idem().max_request_bytes(body.len() - 1)).await;
    small
        .call(post_order(ALICE, "k", &body))
        .await
        .assert_idem_problem(413, "request-body-too-large");
    assert_eq!((env.keys().await, env.orders().await), (0, 0));

    // Exactly at the limit is fine, and the key was never taken.
    let exact = support::service(&env.idem().max_request_bytes(body.len())).await;
    exact
        .call(post_order(ALICE, "k", &body))
        .await
        .assert_created();
    assert_eq!(env.orders().await, 1);
}

async fn a_response_over_the_stored_limit_rolls_back<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let body = order_json("tea", 1, 100);
    let small = support::service(&env.idem().max_stored_bytes(16)).await;
    let reply = small.call(post_order(ALICE, "k", &body)).await;
    reply.assert_idem_problem(500, "response-too-large");
    assert_eq!(
        env.orders().await,
        0,
        "the order is not committed without a replayable answer"
    );
    assert_eq!(env.keys().await, 0);

    let roomy = support::service(&env.idem()).await;
    let created = roomy.call(post_order(ALICE, "k", &body)).await;
    created.assert_created();
    roomy
        .call(post_order(ALICE, "k", &body))
        .await
        .assert_replay_of(&created);
    assert_eq!(env.orders().await, 1);
}

support::backend_tests!(
    a_request_body_over_the_limit_is_413_and_stores_nothing,
    a_response_over_the_stored_limit_rolls_back,
);
