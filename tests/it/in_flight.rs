//! A duplicate of a request that is still running waits at most `claim_wait`, then gets
//! 409 `request-in-progress` with `Retry-After: 1`; once the first completes, the
//! duplicate replays it.
//!
//! The first request is held at a point the test chooses rather than slowed by a sleep,
//! so the test asserts the order of events and their outcomes, never how long they took:
//! it holds on a machine of any speed.

use crate::support;

use std::time::Duration;

use actix_web::web;
use futures_util::future::join;
use support::held::{self, Gate};
use support::{ALICE, Env, TestBackend, post};

async fn a_duplicate_during_the_first_gets_409_then_replays<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let gate = web::Data::new(Gate::default());
    let idem = env.idem().claim_wait(Duration::from_millis(200));
    let app = held::app(&idem, &gate).await;
    let body = support::order_json("tea", 1, 100);
    let request = || post("/test/held", ALICE, "slow", &body);

    let first = app.call(request());
    let duplicate = async {
        // The first has claimed its key and written its order, and waits at the gate.
        gate.reached().await;
        let reply = app.call(request()).await;
        // Still in flight: nothing is committed yet.
        let committed = (env.keys().await, env.orders().await);
        gate.open();
        (reply, committed)
    };
    let (first, (dup, committed)) = join(first, duplicate).await;

    // The 409 came while the first was held, before anything of it was committed.
    dup.assert_idem_problem(409, "request-in-progress");
    assert_eq!(dup.header("retry-after"), Some("1"));
    assert!(!dup.replayed());
    assert_eq!(
        committed,
        (0, 0),
        "nothing was committed while the first ran"
    );

    assert_eq!((first.status, &first.body[..]), (201, &b"held"[..]));
    assert!(!first.replayed());

    // Retrying after Retry-After, once the first has completed, replays it.
    let retry = app.call(request()).await;
    retry.assert_replay_of(&first);
    assert_eq!(env.orders().await, 1);
}

support::backend_tests!(a_duplicate_during_the_first_gets_409_then_replays,);
