//! `cargo run --example orders` as a client meets it: the real binary, started with
//! `DATABASE_URL` (PostgreSQL or SQLite, or none) and `BIND_ADDR`, spoken to over HTTP.
//! Every test runs against both binaries of the one contract: actix-web's `orders` and
//! axum's `orders-axum`.

use crate::phased_support;
use crate::support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use phased_support::{example_binary_of, example_tests, free_port};
use serde_json::Value;
use support::{ALICE, APP_PROBLEM, TestBackend, order_json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long the example may take to migrate and start listening.
const STARTUP: Duration = Duration::from_secs(30);

/// Starts the example on a free port and waits for it to say it serves; returns the
/// child (killed when dropped) and its base URL. Without `database_url` it runs in `dir`
/// with `DATABASE_URL` unset.
async fn start_example(example: &str, database_url: Option<&str>, dir: &Path) -> (Child, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut command = Command::new(example_binary_of(example));
    match database_url {
        Some(url) => command.env("DATABASE_URL", url),
        None => command.env_remove("DATABASE_URL"),
    };
    let mut child = command
        .current_dir(dir)
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

async fn the_example_serves_the_protocol_over_http<DB: TestBackend>(example: &str) {
    let (db, pool) = DB::open().await;
    let (mut child, base) =
        start_example(example, Some(&DB::url(&db)), &std::env::temp_dir()).await;
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
    assert_eq!(DB::scalar(&pool, "SELECT count(*) FROM orders").await, 1);
    let histories = (
        DB::scalar(&pool, "SELECT count(*) FROM _sqlx_migrations").await,
        DB::scalar(&pool, "SELECT count(*) FROM _idem_migrations").await,
    );
    assert!(histories.0 >= 1 && histories.1 >= 1, "{histories:?}");

    child.kill().await.expect("stop the example");
}

async fn it_serves_the_protocol_over_http_on_postgres(example: &'static str) {
    the_example_serves_the_protocol_over_http::<sqlx::Postgres>(example).await;
}

async fn it_serves_the_protocol_over_http_on_sqlite(example: &'static str) {
    the_example_serves_the_protocol_over_http::<sqlx::Sqlite>(example).await;
}

/// The newcomer's `cargo run --example orders`: no `DATABASE_URL`, so a SQLite file in
/// the current directory, named at startup; the orders survive a restart.
async fn without_database_url_it_keeps_orders_in_a_sqlite_file(example: &'static str) {
    let dir = idem_testkit::TestSqlite::new();
    let cwd = dir.path().parent().expect("the database's directory");
    let create = |base: &str| {
        reqwest::Client::new()
            .post(format!("{base}/orders"))
            .header("x-account-id", ALICE.to_string())
            .header("idempotency-key", "first-run")
            .header("content-type", "application/json")
            .body(order_json("tea", 1, 100))
    };

    let (mut child, base) = start_example(example, None, cwd).await;
    let created = send(create(&base)).await;
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    child.kill().await.expect("stop the example");
    assert!(
        cwd.join("orders.db").exists(),
        "the default file is orders.db"
    );

    let (mut child, base) = start_example(example, None, cwd).await;
    let replayed = send(create(&base)).await;
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.body, created.body, "the key survived the restart");
    child.kill().await.expect("stop the example");
}

async fn an_unknown_database_url_exits_with_a_clear_message(example: &'static str) {
    let output = Command::new(example_binary_of(example))
        .env("DATABASE_URL", "mysql://localhost/orders")
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
        stderr.contains("DATABASE_URL must start with postgres://"),
        "the message names the variable and the choices: {stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(output.stdout.is_empty(), "it did not start serving");
}

example_tests!(
    it_serves_the_protocol_over_http_on_postgres,
    it_serves_the_protocol_over_http_on_sqlite,
    without_database_url_it_keeps_orders_in_a_sqlite_file,
    an_unknown_database_url_exits_with_a_clear_message,
);
