//! `cargo run --example orders` as a client meets it: the real binary, started with
//! `DATABASE_URL` and `BIND_ADDR`, spoken to over HTTP.

mod phased_support;
mod support;

use std::process::Stdio;
use std::time::Duration;

use idem_testkit::TestDb;
use phased_support::{example_binary, free_port};
use serde_json::Value;
use support::{ALICE, APP_PROBLEM, order_json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long the example may take to migrate and start listening.
const STARTUP: Duration = Duration::from_secs(30);

/// Starts the example on a free port and waits for it to say it serves; returns the
/// child (killed when dropped) and its base URL.
async fn start_example(db: &TestDb) -> (Child, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(example_binary())
        .env("DATABASE_URL", db.url())
        .env("BIND_ADDR", &addr)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the example");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let expected = format!("orders: serving on http://{addr}");
    let waited = tokio::time::timeout(STARTUP, async {
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            if line == expected {
                return true;
            }
        }
        false
    })
    .await;
    if waited != Ok(true) {
        let _ = child.start_kill();
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr).await;
        }
        panic!(
            "the example did not print {expected:?} (timed out: {}); stderr: {stderr}",
            waited.is_err()
        );
    }
    (child, format!("http://{addr}"))
}

struct HttpReply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl HttpReply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("text header"))
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

async fn send(request: reqwest::RequestBuilder) -> HttpReply {
    let response = request.send().await.expect("HTTP request");
    HttpReply {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.bytes().await.expect("body").to_vec(),
    }
}

#[tokio::test]
async fn the_example_serves_the_protocol_over_http() {
    let db = TestDb::new().await;
    let (mut child, base) = start_example(&db).await;
    let client = reqwest::Client::new();
    let body = order_json("green tea", 2, 1299);
    let create = || {
        client
            .post(format!("{base}/orders"))
            .header("x-account-id", ALICE.to_string())
            .header("idempotency-key", "4a7f6c1e-http")
            .header("content-type", "application/json")
            .body(body.clone())
    };

    let created = send(create()).await;
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    assert_eq!(created.header("idempotent-replayed"), None);
    assert_eq!(created.header("content-type"), Some("application/json"));
    let order = created.json();
    let id = order["id"].as_i64().expect("integer id");
    assert_eq!(
        created.header("location"),
        Some(format!("/orders/{id}").as_str())
    );
    assert_eq!(order["item"], "green tea");
    assert_eq!(order["quantity"], 2);
    assert_eq!(order["amount_cents"], 1299);

    let replayed = send(create()).await;
    assert_eq!(replayed.status, 201);
    assert_eq!(replayed.body, created.body, "byte-identical replay");
    assert_eq!(replayed.header("location"), created.header("location"));
    assert_eq!(replayed.header("content-type"), Some("application/json"));
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));

    let one = send(
        client
            .get(format!("{base}/orders/{id}"))
            .header("x-account-id", ALICE.to_string()),
    )
    .await;
    assert_eq!(one.status, 200);
    assert_eq!(one.body, created.body, "GET shows the created order");

    let list = send(
        client
            .get(format!("{base}/orders"))
            .header("x-account-id", ALICE.to_string()),
    )
    .await;
    assert_eq!(list.status, 200);
    assert_eq!(list.json(), Value::Array(vec![order]));

    let anonymous = send(
        client
            .post(format!("{base}/orders"))
            .header("idempotency-key", "anonymous")
            .header("content-type", "application/json")
            .body(body.clone()),
    )
    .await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(
        anonymous.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(
        anonymous.json()["type"],
        format!("{APP_PROBLEM}unauthenticated")
    );
    let anonymous_get = send(client.get(format!("{base}/orders"))).await;
    assert_eq!(anonymous_get.status, 401);

    // The example applied both histories, each in its own table.
    let pool = db.pool(1).await;
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(orders, 1);
    let histories: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM _sqlx_migrations), (SELECT count(*) FROM _idem_migrations)",
    )
    .fetch_one(&pool)
    .await
    .expect("both history tables exist");
    assert!(histories.0 >= 1 && histories.1 >= 1, "{histories:?}");

    child.kill().await.expect("stop the example");
}

#[tokio::test]
async fn without_database_url_it_exits_with_a_clear_message() {
    let output = Command::new(example_binary())
        .env_remove("DATABASE_URL")
        .env("BIND_ADDR", format!("127.0.0.1:{}", free_port()))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(10), output)
        .await
        .expect("it exits promptly")
        .expect("run the example");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("DATABASE_URL is not set"),
        "the message names the variable: {stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(output.stdout.is_empty(), "it did not start serving");
}
