//! A deterministic business refusal (402 card declined) is a completed outcome: stored
//! for the key and replayed byte for byte, while no order exists.

use crate::support;

use support::app::CARD_LIMIT_CENTS;
use support::{ALICE, Env, TestBackend, order_json, post_order};

async fn a_declined_card_is_stored_and_replayed<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let body = order_json("yacht", 1, CARD_LIMIT_CENTS + 1);

    let first = app.call(post_order(ALICE, "declined", &body)).await;
    let problem = first.assert_app_problem(402, "card-declined");
    assert_eq!(
        problem["detail"],
        "the card was declined: 1000001 cents is over the limit of 1000000 cents"
    );
    assert!(!first.replayed());
    assert_eq!(first.header("location"), None);
    assert_eq!(env.orders().await, 0, "a declined card creates no order");
    assert_eq!(
        env.key_rows().await,
        [(
            ALICE.to_string(),
            "declined".to_owned(),
            "completed".to_owned(),
            Some(402)
        )],
        "the 402 is stored as the key's outcome"
    );

    for _ in 0..2 {
        let again = app.call(post_order(ALICE, "declined", &body)).await;
        again.assert_replay_of(&first);
        assert_eq!(again.status, 402);
        assert_eq!(
            again.header("content-type"),
            Some("application/problem+json")
        );
    }
    assert_eq!(env.orders().await, 0);

    // The outcome belongs to the key: a lower amount with the same key is a different
    // request, not a second chance.
    let lower = app
        .call(post_order(ALICE, "declined", &order_json("yacht", 1, 10)))
        .await;
    lower.assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(env.orders().await, 0);
}

async fn the_card_limit_itself_is_accepted<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    let reply = app
        .call(post_order(
            ALICE,
            "at-limit",
            &order_json("car", 1, CARD_LIMIT_CENTS),
        ))
        .await;
    reply.assert_created();
    assert_eq!(reply.json()["amount_cents"], 1_000_000);
    assert_eq!(env.orders().await, 1);
}

support::backend_tests!(
    a_declined_card_is_stored_and_replayed,
    the_card_limit_itself_is_accepted,
);
