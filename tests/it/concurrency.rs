//! Twenty identical keyed requests at once: the database lets exactly one run the
//! handler; every other gets a byte-identical replay or a 409 with `Retry-After: 1`.

use crate::support;

use std::time::Duration;

use futures_util::future::join_all;
use support::{ALICE, Env, Reply, TestApp, TestBackend, order_json, post_order};

const PARALLEL: usize = 20;

/// Sends `PARALLEL` copies of one keyed request at once and checks the protocol's promise;
/// returns the number of replays and of 409s.
async fn twenty_at_once<DB: TestBackend>(
    env: &Env<DB>,
    app: &TestApp,
    uri: &str,
) -> (usize, usize) {
    let body = order_json("espresso", 3, 900);
    let replies: Vec<Reply> =
        join_all((0..PARALLEL).map(|_| app.call(post_order(ALICE, "same-key", &body).uri(uri))))
            .await;

    let originals: Vec<&Reply> = replies
        .iter()
        .filter(|r| !r.replayed() && r.status == 201)
        .collect();
    assert_eq!(
        originals.len(),
        1,
        "exactly one response runs the handler: {replies:#?}"
    );
    let original = originals[0];
    let id = original.assert_created();

    let (mut replays, mut conflicts) = (0, 0);
    for reply in &replies {
        if std::ptr::eq(reply, original) {
            continue;
        }
        if reply.status == 409 {
            reply.assert_idem_problem(409, "request-in-progress");
            assert_eq!(reply.header("retry-after"), Some("1"));
            assert!(!reply.replayed());
            conflicts += 1;
        } else {
            reply.assert_replay_of(original);
            assert_eq!(
                reply.header("location"),
                Some(format!("/orders/{id}").as_str())
            );
            replays += 1;
        }
    }
    assert_eq!(replays + conflicts, PARALLEL - 1);
    assert_eq!(env.orders().await, 1, "exactly one order row");
    assert_eq!(
        env.key_rows().await,
        [(
            ALICE.to_string(),
            "same-key".to_owned(),
            "completed".to_owned(),
            Some(201)
        )]
    );
    (replays, conflicts)
}

async fn twenty_parallel_requests_create_one_order<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let app = support::service(&env.idem()).await;
    twenty_at_once(&env, &app, "/orders").await;
}

async fn twenty_overlapping_requests_wait_for_the_first_and_replay_it<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    // On SQLite the duplicates then take the write lock one at a time, each polling for it
    // (SQLite's busy handler, up to 100 ms between tries): 5 s leaves every one of them
    // time to get its turn on a loaded machine. PostgreSQL needs only the 300 ms.
    let app = support::service(&env.idem().claim_wait(Duration::from_secs(5))).await;
    let (replays, conflicts) = twenty_at_once(&env, &app, "/orders?delay_ms=300").await;
    // The first holds its key for 300 ms, well within the claim wait, so every duplicate
    // waits for it and replays its answer instead of getting a 409.
    assert_eq!((replays, conflicts), (PARALLEL - 1, 0));
}

async fn duplicates_that_wait_less_than_the_first_runs_get_409<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let idem = env.idem().claim_wait(Duration::from_millis(50));
    let app = support::service(&idem).await;
    let (replays, conflicts) = twenty_at_once(&env, &app, "/orders?delay_ms=300").await;
    // Each duplicate that overlaps the first gives up 50 ms into its 300 ms. On a loaded
    // machine a duplicate may only reach its claim after the first committed; that one
    // replays, which is also right. What must never happen is waiting in line.
    assert_eq!(replays + conflicts, PARALLEL - 1);
    assert!(
        conflicts >= 1,
        "no duplicate overlapped the first: {replays} replays"
    );
}

support::backend_tests!(
    twenty_parallel_requests_create_one_order,
    twenty_overlapping_requests_wait_for_the_first_and_replay_it,
    duplicates_that_wait_less_than_the_first_runs_get_409,
);
