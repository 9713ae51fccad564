//! Shared by the fault tests (`fault_*.rs`): a client that keeps retrying a keyed request
//! the way a well-behaved SDK does, the checks every answer must pass, and what the
//! database holds while and after a fault.
//!
//! Every fault test file says `mod support; mod phased_support; mod fault_support;`.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::phased_support::{HttpReply, send};
use crate::support::IDEM_PROBLEM;

/// A client whose requests give up after `timeout`, with no connection reuse between a
/// fault and the next request (a killed server leaves dead keep-alive connections).
pub(crate) fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .pool_max_idle_per_host(0)
        .build()
        .expect("build the HTTP client")
}

/// `POST {base}{path}` as `account` with `key` and the JSON `body`.
pub(crate) fn post_order(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    account: i64,
    key: &str,
    body: &str,
) -> reqwest::RequestBuilder {
    client
        .post(format!("{base}{path}"))
        .header("x-account-id", account.to_string())
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(body.to_owned())
}

/// Everything one logical request went through until it got a final answer.
#[derive(Debug, Default)]
pub(crate) struct Retried {
    /// The first answer that is neither 409 nor 5xx, if one came before the deadline.
    pub(crate) last: Option<HttpReply>,
    /// Every 409 and 5xx answer before it.
    pub(crate) interim: Vec<HttpReply>,
    /// Requests that got no answer (connection refused or reset, timeout).
    pub(crate) no_answer: Vec<String>,
}

impl Retried {
    /// Requests sent for this operation.
    pub(crate) fn sent(&self) -> usize {
        self.interim.len() + self.no_answer.len() + usize::from(self.last.is_some())
    }
}

/// Sends `make()` until the answer is neither 409 nor 5xx, pausing `pause` between
/// tries, for at most `patience`. The interim answers are checked to be problems.
pub(crate) async fn until_final(
    make: impl Fn() -> reqwest::RequestBuilder,
    pause: Duration,
    patience: Duration,
) -> Retried {
    let deadline = Instant::now() + patience;
    let mut retried = Retried::default();
    loop {
        match send(make()).await {
            Ok(reply) if reply.status == 409 || reply.status >= 500 => {
                assert_retryable_problem(&reply);
                retried.interim.push(reply);
            }
            Ok(reply) => {
                retried.last = Some(reply);
                return retried;
            }
            Err(error) => retried.no_answer.push(error.to_string()),
        }
        if Instant::now() >= deadline {
            return retried;
        }
        tokio::time::sleep(pause).await;
    }
}

/// A 409 or 5xx answer must be a problem+json document; idem's 409 is
/// `request-in-progress` with `Retry-After`.
pub(crate) fn assert_retryable_problem(reply: &HttpReply) {
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json"),
        "a {} answer is a problem document: {}",
        reply.status,
        reply.text()
    );
    let problem = reply.json();
    assert_eq!(problem["status"], reply.status, "{problem}");
    if reply.status == 409 {
        assert_eq!(
            problem["type"],
            format!("{IDEM_PROBLEM}request-in-progress"),
            "{problem}"
        );
        assert!(reply.header("retry-after").is_some(), "409 has Retry-After");
    }
}

/// Whether idem marked the answer as a replay.
pub(crate) fn is_replay(reply: &HttpReply) -> bool {
    match reply.header("idempotent-replayed") {
        None => false,
        Some("true") => true,
        Some(other) => panic!("Idempotent-Replayed: {other:?}"),
    }
}

/// Asserts that `replay` repeats `original` exactly: status, body bytes and the
/// replayable headers, with `Idempotent-Replayed: true`.
pub(crate) fn assert_same_answer(original: &HttpReply, replay: &HttpReply, what: &str) {
    assert!(is_replay(replay), "{what}: a repeat is marked as a replay");
    assert_eq!(replay.status, original.status, "{what}: status");
    assert_eq!(
        replay.text(),
        original.text(),
        "{what}: body bytes (as text for the message)"
    );
    assert_eq!(replay.body, original.body, "{what}: body bytes");
    for name in ["location", "content-type"] {
        assert_eq!(
            replay.header(name),
            original.header(name),
            "{what}: {name} header"
        );
    }
}

/// Transactions of other sessions open on the current database (a request in flight, or
/// one whose client vanished and whose backend has not noticed yet).
pub(crate) async fn open_transactions(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
          WHERE datname = current_database() AND pid <> pg_backend_pid() \
            AND xact_start IS NOT NULL",
    )
    .fetch_one(pool)
    .await
    .expect("read pg_stat_activity")
}

/// Waits until a session on the current database sits inside a transaction that has
/// written (the test hook's sleep after the insert), or panics after `patience`.
pub(crate) async fn wait_for_writing_transaction(pool: &PgPool, patience: Duration) {
    let deadline = Instant::now() + patience;
    loop {
        let writing: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
              WHERE datname = current_database() AND pid <> pg_backend_pid() \
                AND state = 'idle in transaction' AND backend_xid IS NOT NULL",
        )
        .fetch_one(pool)
        .await
        .expect("read pg_stat_activity");
        if writing > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no request reached its transaction within {patience:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until no other session has a transaction open on the current database: every
/// request whose client or server vanished has been committed or rolled back.
pub(crate) async fn wait_until_settled(pool: &PgPool, patience: Duration) {
    let deadline = Instant::now() + patience;
    while open_transactions(pool).await > 0 {
        assert!(
            Instant::now() < deadline,
            "transactions still open after {patience:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `(state, response_status, response_body)` of every key row of `account`, by key.
pub(crate) async fn keys_of(
    pool: &PgPool,
    account: i64,
) -> Vec<(String, String, Option<i16>, Option<Vec<u8>>)> {
    sqlx::query_as(
        "SELECT idem_key, state, response_status, response_body FROM idem_keys \
          WHERE scope = $1 ORDER BY idem_key COLLATE \"C\"",
    )
    .bind(account.to_string())
    .fetch_all(pool)
    .await
    .expect("read idem_keys")
}

/// `GET {base}/health`: its status, or `None` without an answer.
pub(crate) async fn health(client: &reqwest::Client, base: &str) -> Option<u16> {
    send(client.get(format!("{base}/health")))
        .await
        .ok()
        .map(|reply| reply.status)
}

/// Polls `GET /health` until it answers `want`, or panics after `patience`.
pub(crate) async fn wait_for_health(
    client: &reqwest::Client,
    base: &str,
    want: u16,
    patience: Duration,
) {
    let deadline = Instant::now() + patience;
    loop {
        if health(client, base).await == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "GET /health did not answer {want} within {patience:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
