//! The database cannot be reached: at startup the example says so and exits instead of
//! hanging; while it runs, requests fail within a bounded time with problem+json, the
//! health endpoint says 503, and everything recovers by itself when the database is back.

use crate::fault_support;
use crate::phased_support;
use crate::support;

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fault_support::{assert_same_answer, client, health, is_replay, post_order, wait_for_health};
use idem_testkit::{PgCluster, StopMode};
use phased_support::{Example, count, example_binary, free_port, send};
use support::{ALICE, APP_PROBLEM, IDEM_PROBLEM, order_json};
use tokio::io::AsyncReadExt;

/// Far more than the example's 5 s connection wait; only a hang gets near it.
const BOUND: Duration = Duration::from_secs(30);

async fn at_startup_an_unreachable_database_is_a_clear_error_not_a_hang() {
    // A port nobody listens on.
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", free_port());
    let started = Instant::now();
    let mut child = tokio::process::Command::new(example_binary())
        .env("DATABASE_URL", &url)
        .env("BIND_ADDR", format!("127.0.0.1:{}", free_port()))
        .env_remove("IDEM_EXAMPLE_CRASH_AFTER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the example");
    let status = tokio::time::timeout(BOUND, child.wait())
        .await
        .expect("the example gives up instead of hanging")
        .expect("wait for the example");
    let elapsed = started.elapsed();
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let _ = child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .await;
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .await;
    assert!(!status.success(), "exit status {status}");
    assert!(
        stderr.contains("orders: cannot connect to DATABASE_URL"),
        "the error says what failed: {stderr}"
    );
    assert!(!stdout.contains("serving"), "it never served: {stdout}");
    eprintln!(
        "fault_db_unreachable: startup without a database exits with {status} after \
         {elapsed:.1?}: {}",
        stderr.trim()
    );
}

async fn a_database_down_for_a_while_gives_503_and_the_service_recovers() {
    let cluster = Arc::new(
        tokio::task::spawn_blocking(PgCluster::start)
            .await
            .expect("start the cluster"),
    );
    let example = Example::start(&cluster.url(), None).await;
    let http = client(Duration::from_secs(60));
    assert_eq!(health(&http, &example.base).await, Some(200));
    let before_body = order_json("before", 1, 100);
    let before = send(post_order(
        &http,
        &example.base,
        "/orders",
        ALICE,
        "before",
        &before_body,
    ))
    .await
    .expect("answer");
    assert_eq!(before.status, 201, "{}", before.text());

    let stopping = Arc::clone(&cluster);
    tokio::task::spawn_blocking(move || stopping.stop(StopMode::Fast))
        .await
        .expect("stop the cluster");

    // Health: 503 problem+json, answered well within the bound.
    let asked = Instant::now();
    let down = send(http.get(format!("{}/health", example.base)))
        .await
        .expect("health answers while the database is down");
    let health_took = asked.elapsed();
    assert_eq!(down.status, 503, "{}", down.text());
    assert_eq!(
        down.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(
        down.json()["type"],
        format!("{APP_PROBLEM}database-unavailable")
    );
    assert!(health_took < BOUND, "health took {health_took:?}");

    // A keyed request: idem's 503 storage-unavailable, retryable, nothing stored.
    let during_body = order_json("during", 1, 200);
    let asked = Instant::now();
    let refused = send(post_order(
        &http,
        &example.base,
        "/orders",
        ALICE,
        "during",
        &during_body,
    ))
    .await
    .expect("a request is answered while the database is down");
    let request_took = asked.elapsed();
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(
        refused.json()["type"],
        format!("{IDEM_PROBLEM}storage-unavailable")
    );
    assert!(
        refused.header("retry-after").is_some(),
        "503 says when to retry"
    );
    assert!(request_took < BOUND, "the request took {request_took:?}");

    let resuming = Arc::clone(&cluster);
    tokio::task::spawn_blocking(move || resuming.resume())
        .await
        .expect("start the cluster again");
    // The same process, never restarted, serves again.
    wait_for_health(&http, &example.base, 200, Duration::from_secs(60)).await;
    let during = send(post_order(
        &http,
        &example.base,
        "/orders",
        ALICE,
        "during",
        &during_body,
    ))
    .await
    .expect("answer");
    assert_eq!(during.status, 201, "{}", during.text());
    assert!(
        !is_replay(&during),
        "nothing was stored while the database was down"
    );
    let replay = send(post_order(
        &http,
        &example.base,
        "/orders",
        ALICE,
        "before",
        &before_body,
    ))
    .await
    .expect("answer");
    assert_same_answer(&before, &replay, "the key completed before the outage");

    let pool = sqlx::PgPool::connect(&cluster.url())
        .await
        .expect("connect");
    assert_eq!(count(&pool, "orders").await, 2);
    assert_eq!(count(&pool, "idem_keys").await, 2);
    pool.close().await;
    eprintln!(
        "fault_db_unreachable: database stopped for a while: /health 503 in {health_took:.1?}, \
         POST /orders 503 in {request_took:.1?}, recovered without a restart, 0 violations"
    );
    example.stop().await;
}

support::both_frameworks!(
    #[tokio::test]
    at_startup_an_unreachable_database_is_a_clear_error_not_a_hang,
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_database_down_for_a_while_gives_503_and_the_service_recovers,
);
