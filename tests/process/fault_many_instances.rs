//! Three example processes on one database, the same keyed request sent to all of them
//! at once, many times: one business effect per key, and every final answer the same
//! bytes as the original.

use crate::fault_support;
use crate::phased_support;
use crate::support;

use std::time::Duration;

use fault_support::{assert_same_answer, client, is_replay, keys_of, post_order, until_final};
use idem_testkit::TestDb;
use phased_support::{Example, HttpReply};
use support::{ALICE, order_json};

/// Keys sent, one after the other; each to every instance at once.
const KEYS: usize = 16;
/// Copies of each request sent to each instance at the same moment.
const COPIES_PER_INSTANCE: usize = 4;

async fn the_same_key_sent_to_three_instances_takes_effect_once() {
    let db = TestDb::new().await;
    let pool = db.pool(4).await;
    // One at a time: each applies the migrations (the second and third find them done).
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(Example::start(db.url(), None).await);
    }
    let bases: Vec<String> = instances.iter().map(|i| i.base.clone()).collect();
    let http = client(Duration::from_secs(60));

    let (mut sent, mut in_flight, mut replays) = (0, 0, 0);
    let mut created_ids = Vec::new();
    for k in 0..KEYS {
        let key = format!("many-instances-{k}");
        // Every fourth order is over the card limit: a 402 is an outcome like a 201.
        let amount = if k % 4 == 3 {
            2_000_000
        } else {
            1000 + k as i64
        };
        let body = order_json("tea", 1, amount);
        // Some requests hold their transaction past idem's claim wait (1 s), so waiting
        // duplicates get 409 and retry; some hold it less, so duplicates wait and replay;
        // the others race the commit itself.
        let path = match k % 4 {
            0 => "/orders?delay_ms=1500",
            2 => "/orders?delay_ms=300",
            _ => "/orders",
        };
        let mut tasks = Vec::new();
        for base in &bases {
            for _ in 0..COPIES_PER_INSTANCE {
                let (http, base, key, body) =
                    (http.clone(), base.clone(), key.clone(), body.clone());
                tasks.push(tokio::spawn(async move {
                    until_final(
                        || post_order(&http, &base, path, ALICE, &key, &body),
                        Duration::from_millis(50),
                        Duration::from_secs(120),
                    )
                    .await
                }));
            }
        }
        let mut finals: Vec<HttpReply> = Vec::new();
        for task in tasks {
            let retried = task.await.expect("client task");
            sent += retried.sent();
            assert!(
                retried.no_answer.is_empty(),
                "{key}: every request is answered: {:?}",
                retried.no_answer
            );
            for interim in &retried.interim {
                assert_eq!(
                    interim.status,
                    409,
                    "{key}: only 409 while in flight: {}",
                    interim.text()
                );
                in_flight += 1;
            }
            finals.push(retried.last.expect("a final answer within the patience"));
        }

        let originals: Vec<&HttpReply> = finals.iter().filter(|r| !is_replay(r)).collect();
        assert_eq!(
            originals.len(),
            1,
            "{key}: exactly one answer ran the handler; statuses: {:?}",
            finals.iter().map(|r| r.status).collect::<Vec<_>>()
        );
        let original = originals[0];
        let expected = if amount > 1_000_000 { 402 } else { 201 };
        assert_eq!(original.status, expected, "{key}: {}", original.text());
        for reply in finals.iter().filter(|r| is_replay(r)) {
            assert_same_answer(original, reply, &key);
            replays += 1;
        }
        if expected == 201 {
            created_ids.push(original.json()["id"].as_i64().expect("order id"));
        }
    }

    // One row per 201, the very row each original answer names; none for the 402s.
    let mut rows: Vec<i64> = sqlx::query_scalar("SELECT id FROM orders ORDER BY id")
        .fetch_all(&pool)
        .await
        .expect("read orders");
    rows.sort_unstable();
    created_ids.sort_unstable();
    assert_eq!(rows, created_ids, "one order per created key");
    let keys = keys_of(&pool, ALICE).await;
    assert_eq!(keys.len(), KEYS, "one key row per key");
    assert!(keys.iter().all(|(_, state, _, _)| state == "completed"));

    eprintln!(
        "fault_many_instances: 3 instances, {KEYS} keys, {sent} requests, {in_flight} answered \
         409 while in flight, {replays} replays, {} orders, 0 violations",
        rows.len()
    );
    for instance in instances {
        instance.stop().await;
    }
}

support::both_frameworks!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    the_same_key_sent_to_three_instances_takes_effect_once,
);
