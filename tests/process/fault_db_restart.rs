//! The database is restarted, cleanly and as in a crash, and stopped for a few seconds,
//! while clients keep two example processes busy. Clients see 5xx problems or connection
//! errors and retry; none sees a duplicate, no completed key is lost, and the processes,
//! never restarted, serve again once the database is back.

use crate::fault_support;
use crate::phased_support;
use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fault_support::{Retried, assert_same_answer, client, is_replay, post_order, until_final};
use idem_testkit::{PgCluster, StopMode};
use phased_support::{Example, send};
use support::{ALICE, order_json};

/// Concurrent clients, each sending its own keys one after another.
const CLIENTS: usize = 6;

/// One logical request of a client and what it went through.
struct Operation {
    key: String,
    path: &'static str,
    body: String,
    retried: Retried,
}

async fn restarts_of_the_database_under_load_lose_nothing_and_duplicate_nothing() {
    let cluster = Arc::new(
        tokio::task::spawn_blocking(PgCluster::start)
            .await
            .expect("start the cluster"),
    );
    let first = Example::start(&cluster.url(), None).await;
    let second = Example::start(&cluster.url(), None).await;
    let bases = [first.base.clone(), second.base.clone()];
    let http = client(Duration::from_secs(30));
    let faults_done = Arc::new(AtomicBool::new(false));

    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (http, bases, faults_done) = (http.clone(), bases.clone(), faults_done.clone());
        clients.push(tokio::spawn(async move {
            let mut operations = Vec::new();
            let mut after_faults = 0;
            // Keys keep coming until a few went through after the last fault.
            while after_faults < 3 {
                if faults_done.load(Ordering::SeqCst) {
                    after_faults += 1;
                }
                let n = operations.len();
                let key = format!("restart-{c}-{n}");
                // One in five is declined (402, stored like a 201); some hold their
                // transaction, so a restart catches them inside it.
                let amount = if n % 5 == 4 {
                    2_000_000
                } else {
                    100 + n as i64
                };
                let path = if n % 3 == 0 {
                    "/orders?delay_ms=150"
                } else {
                    "/orders"
                };
                let body = order_json(&key, 1, amount);
                // Alternate instances, as a load balancer would.
                let base = bases[(c + n) % bases.len()].clone();
                let retried = until_final(
                    || post_order(&http, &base, path, ALICE, &key, &body),
                    Duration::from_millis(100),
                    Duration::from_secs(120),
                )
                .await;
                operations.push(Operation {
                    key,
                    path,
                    body,
                    retried,
                });
            }
            operations
        }));
    }

    // Faults: a clean restart, a crash restart, and an outage of a few seconds.
    let mut faults = Vec::new();
    for (mode, down_for) in [
        (StopMode::Fast, Duration::ZERO),
        (StopMode::Immediate, Duration::ZERO),
        (StopMode::Fast, Duration::from_secs(3)),
        (StopMode::Immediate, Duration::from_secs(1)),
    ] {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let cluster = Arc::clone(&cluster);
        tokio::task::spawn_blocking(move || {
            cluster.stop(mode);
            std::thread::sleep(down_for);
            cluster.resume();
        })
        .await
        .expect("restart the database");
        faults.push(format!("{mode:?} restart, down {down_for:?}"));
    }
    faults_done.store(true, Ordering::SeqCst);

    let mut operations = Vec::new();
    for task in clients {
        operations.extend(task.await.expect("client task"));
    }

    let (mut sent, mut errors_5xx, mut no_answer, mut in_flight) = (0, 0, 0, 0);
    let mut created = Vec::new();
    for op in &operations {
        sent += op.retried.sent();
        no_answer += op.retried.no_answer.len();
        errors_5xx += op
            .retried
            .interim
            .iter()
            .filter(|r| r.status >= 500)
            .count();
        in_flight += op
            .retried
            .interim
            .iter()
            .filter(|r| r.status == 409)
            .count();
        let last = op
            .retried
            .last
            .as_ref()
            .unwrap_or_else(|| panic!("{}: completed when retried", op.key));
        let declined = op.body.contains("2000000");
        assert_eq!(
            last.status,
            if declined { 402 } else { 201 },
            "{}: {}",
            op.key,
            last.text()
        );
        // Sent again now: a replay of the very answer the client got, so no completed
        // key was lost and no second effect happened.
        let again = send(post_order(
            &http, &bases[0], op.path, ALICE, &op.key, &op.body,
        ))
        .await
        .expect("answer after the faults");
        if is_replay(last) {
            assert_eq!(again.status, last.status, "{}", op.key);
            assert_eq!(again.body, last.body, "{}: replays agree", op.key);
            assert!(is_replay(&again));
        } else {
            assert_same_answer(last, &again, &op.key);
        }
        if !declined {
            created.push((
                op.key.clone(),
                last.json()["id"].as_i64().expect("order id"),
            ));
        }
    }

    let pool = sqlx::PgPool::connect(&cluster.url())
        .await
        .expect("connect");
    let mut rows: Vec<(String, i64)> = sqlx::query_as("SELECT item, id FROM orders")
        .fetch_all(&pool)
        .await
        .expect("read orders");
    rows.sort();
    created.sort();
    assert_eq!(
        rows, created,
        "exactly one order per created key, the one its client was told about"
    );
    let completed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM idem_keys WHERE state = 'completed'")
            .fetch_one(&pool)
            .await
            .expect("count keys");
    assert_eq!(completed, operations.len() as i64, "every key completed");
    pool.close().await;
    for base in &bases {
        assert_eq!(
            fault_support::health(&http, base).await,
            Some(200),
            "{base} recovered without a restart"
        );
    }

    eprintln!(
        "fault_db_restart: {} keys from {CLIENTS} clients over 2 instances, {sent} requests; \
         faults: {}; {errors_5xx} 5xx answers, {no_answer} without an answer, {in_flight} \
         409; {} orders; 0 violations",
        operations.len(),
        faults.join(", "),
        rows.len()
    );
    first.stop().await;
    second.stop().await;
}

support::both_frameworks!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    restarts_of_the_database_under_load_lose_nothing_and_duplicate_nothing,
);
