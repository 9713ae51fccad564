//! A request is never answered about a key it does not hold. While one request holds
//! its key (on SQLite: the database's one write lock), another caller's request with its
//! own key runs or is told the database is busy, and a replay of a completed key is
//! answered from a read, without waiting for the writer. Only a duplicate of the held
//! key hears 409 `request-in-progress` (`in_flight.rs`).

use crate::support;

use std::time::Duration;

use actix_web::web;
use futures_util::future::join;
use support::held::{self, Gate};
use support::{ALICE, BOB, Env, TestBackend, order_json, post, post_order};

/// The body every request of these tests sends.
fn tea() -> String {
    order_json("tea", 1, 100)
}

async fn another_account_with_its_own_key_is_never_told_of_the_held_key<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let gate = web::Data::new(Gate::default());
    let idem = env.idem().claim_wait(Duration::from_millis(200));
    let app = held::app(&idem, &gate).await;

    let alice = app.call(post("/test/held", ALICE, "alice-key", &tea()));
    let bob = async {
        gate.reached().await;
        let bob = app.call(post_order(BOB, "bob-key", &tea())).await;
        // Bob's answer came while Alice still held her key.
        let orders_then = env.orders().await;
        gate.open();
        (bob, orders_then)
    };
    let (alice, (bob, orders_then)) = join(alice, bob).await;

    assert_eq!(orders_then, if bob.status == 201 { 1 } else { 0 });
    match bob.status {
        // PostgreSQL: Bob's key is his own row, nothing to wait for.
        201 => {
            bob.assert_created();
        }
        // SQLite: the one write lock stayed Alice's past Bob's wait.
        _ => {
            let problem = bob.assert_idem_problem(503, "storage-busy");
            assert_eq!(bob.header("retry-after"), Some("1"));
            let detail = problem["detail"].as_str().expect("a detail");
            assert!(detail.contains("busy"), "{detail}");
            assert!(detail.contains("nothing was saved"), "{detail}");
            assert_eq!(env.orders_of(BOB).await, 0);
            // Nothing of Bob's was stored: his retry runs his request.
            app.call(post_order(BOB, "bob-key", &tea()))
                .await
                .assert_created();
        }
    }
    assert_eq!((alice.status, &alice.body[..]), (201, &b"held"[..]));
    assert_eq!(env.orders_of(ALICE).await, 1);
    assert_eq!(env.orders_of(BOB).await, 1);
    assert_eq!(env.keys().await, 2);
}

async fn another_account_waits_for_the_lock_then_runs<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let gate = web::Data::new(Gate::default());
    // Long enough that Bob outwaits Alice on any machine: she is let go right after he
    // was sent.
    let idem = env.idem().claim_wait(Duration::from_secs(30));
    let app = held::app(&idem, &gate).await;

    let alice = app.call(post("/test/held", ALICE, "alice-key", &tea()));
    let bob = async {
        gate.reached().await;
        let bob = app.call(post_order(BOB, "bob-key", &tea()));
        let open = async {
            tokio::task::yield_now().await;
            gate.open();
        };
        join(bob, open).await.0
    };
    let (alice, bob) = join(alice, bob).await;

    assert_eq!(alice.status, 201);
    bob.assert_created();
    assert_eq!(env.orders().await, 2);
}

async fn a_replay_is_answered_while_another_request_holds_the_write_lock<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let gate = web::Data::new(Gate::default());
    // Had the replay waited for the held request, which is let go only after the replay
    // was answered, it would have run out of this wait and been answered 503.
    let idem = env.idem().claim_wait(Duration::from_secs(2));
    let app = held::app(&idem, &gate).await;
    let first = app.call(post_order(ALICE, "done", &tea())).await;
    first.assert_created();

    let holder = app.call(post("/test/held", BOB, "holding", &tea()));
    let replay = async {
        gate.reached().await;
        let replay = app.call(post_order(ALICE, "done", &tea())).await;
        // A different body under the completed key: refused from the same read.
        let mismatch = app
            .call(post_order(ALICE, "done", &order_json("tea", 2, 100)))
            .await;
        gate.open();
        (replay, mismatch)
    };
    let (holder, (replay, mismatch)) = join(holder, replay).await;

    replay.assert_replay_of(&first);
    mismatch.assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(holder.status, 201);
    assert_eq!(env.orders_of(ALICE).await, 1);
    assert_eq!(env.orders_of(BOB).await, 1);
}

async fn sixteen_unique_keys_at_once_never_hear_of_another_key<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    // Short: on SQLite some of them outwait it, which is what this test is about.
    let idem = env.idem().claim_wait(Duration::from_millis(20));
    let app = support::service(&idem).await;
    let replies = futures_util::future::join_all((0..16).map(|i| {
        app.call(post(
            "/orders?delay_ms=50",
            ALICE,
            &format!("unique-{i}"),
            &tea(),
        ))
    }))
    .await;
    let mut created = 0;
    for reply in &replies {
        if reply.status == 201 {
            reply.assert_created();
            created += 1;
        } else {
            reply.assert_idem_problem(503, "storage-busy");
        }
    }
    assert!(created >= 1);
    assert_eq!(env.orders().await, created);
    assert_eq!(env.keys().await, created);
}

support::backend_tests!(
    another_account_with_its_own_key_is_never_told_of_the_held_key,
    another_account_waits_for_the_lock_then_runs,
    a_replay_is_answered_while_another_request_holds_the_write_lock,
    sixteen_unique_keys_at_once_never_hear_of_another_key,
);
