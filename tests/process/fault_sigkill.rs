//! The process is killed (SIGKILL) while a request is inside its transaction, after the
//! business insert and before the commit: nothing is committed, and the client's retry
//! with the same key, to another instance, runs the handler once.

use crate::fault_support;
use crate::phased_support;
use crate::support;

use std::time::Duration;

use fault_support::{
    assert_same_answer, client, is_replay, keys_of, post_order, until_final,
    wait_for_writing_transaction, wait_until_settled,
};
use idem_testkit::TestDb;
use phased_support::{Example, count, send};
use support::{ALICE, order_json};

async fn a_process_killed_in_the_transaction_commits_nothing_and_the_retry_runs_once() {
    let db = TestDb::new().await;
    let pool = db.pool(4).await;
    let mut doomed = Example::start(db.url(), None).await;
    let survivor = Example::start(db.url(), None).await;
    let http = client(Duration::from_secs(60));
    let key = "sigkill-1";
    let body = order_json("kill -9", 1, 4200);
    // The test hook sleeps 3 s after the insert, inside idem's transaction.
    let path = "/orders?delay_ms=3000";

    let in_flight = tokio::spawn(send(post_order(
        &http,
        &doomed.base,
        path,
        ALICE,
        key,
        &body,
    )));
    wait_for_writing_transaction(&pool, Duration::from_secs(30)).await;
    doomed.child.kill().await.expect("SIGKILL the example");
    let answer = in_flight.await.expect("client task");
    assert!(
        answer.is_err(),
        "the client of a killed process gets no answer, not {:?}",
        answer.map(|reply| reply.status)
    );

    // PostgreSQL sees the connection drop and rolls the transaction back.
    wait_until_settled(&pool, Duration::from_secs(30)).await;
    assert_eq!(
        count(&pool, "orders").await,
        0,
        "the insert was not committed"
    );
    assert_eq!(count(&pool, "idem_keys").await, 0, "nor was the key");

    // The client retries with the same key, at the instance still running.
    let retried = until_final(
        || post_order(&http, &survivor.base, path, ALICE, key, &body),
        Duration::from_millis(100),
        Duration::from_secs(60),
    )
    .await;
    let sent_after = retried.sent() + 1;
    let original = retried.last.expect("the retry is answered");
    assert_eq!(original.status, 201, "{}", original.text());
    assert!(!is_replay(&original), "the retry ran the handler");
    let id = original.json()["id"].as_i64().expect("order id");

    let again = send(post_order(&http, &survivor.base, path, ALICE, key, &body))
        .await
        .expect("answer");
    assert_same_answer(&original, &again, key);

    let rows: Vec<i64> = sqlx::query_scalar("SELECT id FROM orders")
        .fetch_all(&pool)
        .await
        .expect("read orders");
    assert_eq!(rows, vec![id], "one order, the retry's");
    let keys = keys_of(&pool, ALICE).await;
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].1, "completed");
    assert_eq!(keys[0].3.as_deref(), Some(original.body.as_slice()));
    eprintln!(
        "fault_sigkill: 1 process killed mid-transaction, {} requests after it, 1 order, \
         0 violations",
        sent_after
    );
    survivor.stop().await;
}

support::both_frameworks!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_process_killed_in_the_transaction_commits_nothing_and_the_retry_runs_once,
);
