//! A duplicate of a request that is still running waits at most `claim_wait`, then gets
//! 409 `request-in-progress` with `Retry-After: 1`; once the first completes, the
//! duplicate replays it.

mod support;

use std::time::{Duration, Instant};

use futures_util::future::join;
use support::{ALICE, Env, TestBackend, post};

async fn a_duplicate_during_the_first_gets_409_then_replays<DB: TestBackend>() {
    let env = Env::<DB>::open().await;
    let idem = env.idem().claim_wait(Duration::from_millis(200));
    let app = support::service(&idem).await;
    let body = support::order_json("tea", 1, 100);
    let request = || post("/orders?delay_ms=1500", ALICE, "slow", &body);

    let started = Instant::now();
    let first = async {
        let reply = app.call(request()).await;
        (reply, started.elapsed())
    };
    let duplicate = async {
        // Let the first claim its key.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let sent = Instant::now();
        let reply = app.call(request()).await;
        let waited = sent.elapsed();
        // Still in flight: nothing is committed yet.
        let keys = env.keys().await;
        let orders = env.orders().await;
        (reply, waited, started.elapsed(), keys, orders)
    };
    let ((first, first_done), (dup, waited, dup_done, keys, orders)) = join(first, duplicate).await;

    dup.assert_idem_problem(409, "request-in-progress");
    assert_eq!(dup.header("retry-after"), Some("1"));
    assert!(!dup.replayed());
    assert!(
        waited >= Duration::from_millis(200),
        "the duplicate waited claim_wait: {waited:?}"
    );
    assert!(
        // Well under the first's 1500 ms, with room for a loaded machine.
        waited < Duration::from_millis(1300),
        "the 409 came quickly: {waited:?}"
    );
    assert!(
        dup_done < first_done,
        "the 409 came while the first was running"
    );
    assert_eq!(
        (keys, orders),
        (0, 0),
        "nothing was committed while the first ran"
    );

    first.assert_created();
    assert!(first_done >= Duration::from_millis(1500));

    // Retrying after Retry-After, once the first has completed, replays it.
    let retry = app.call(request()).await;
    retry.assert_replay_of(&first);
    assert_eq!(env.orders().await, 1);
}

support::backend_tests!(a_duplicate_during_the_first_gets_409_then_replays,);
