//! Shared by the tests of the phased form: a table the test handlers write their side
//! effects to, a way to hold an attempt at a point the test chooses, what idem stored
//! for a key, and the example binaries (actix-web's and axum's) started as child processes.
//!
//! Every test file says `mod support; mod phased_support;` and uses the part it needs.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Notify;

use crate::support::{Env, Framework};

/// The lease of the in-process test handlers: short, so tests wait little for takeovers.
pub(crate) const LEASE: Duration = Duration::from_secs(1);

/// Comfortably past [`LEASE`], measured from the moment an attempt last renewed it.
pub(crate) const PAST_LEASE: Duration = Duration::from_millis(1300);

/// Creates `effects`, where test handlers record each side effect with the attempt that
/// made it, so a test can see which writes survived.
pub(crate) async fn create_effects(env: &Env) {
    sqlx::query(
        "CREATE TABLE effects (id bigserial PRIMARY KEY, attempt int NOT NULL, phase text NOT NULL)",
    )
    .execute(&env.pool)
    .await
    .expect("create effects");
}

/// Records a side effect in the phase's transaction; returns its id.
pub(crate) async fn effect(
    conn: &mut sqlx::PgConnection,
    attempt: usize,
    phase: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar("INSERT INTO effects (attempt, phase) VALUES ($1, $2) RETURNING id")
        .bind(i32::try_from(attempt).expect("few attempts"))
        .bind(phase)
        .fetch_one(conn)
        .await
}

/// `(attempt, phase)` of every surviving side effect, in the order they were written.
pub(crate) async fn effects(pool: &PgPool) -> Vec<(i32, String)> {
    sqlx::query_as("SELECT attempt, phase FROM effects ORDER BY id")
        .fetch_all(pool)
        .await
        .expect("read effects")
}

/// `(phase, fencing_token)` of the recorded phases of `key`, in the order they committed.
pub(crate) async fn recorded_phases(pool: &PgPool, key: &str) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT phase, fencing_token FROM idem_phases WHERE idem_key = $1 ORDER BY recorded_at",
    )
    .bind(key)
    .fetch_all(pool)
    .await
    .expect("read idem_phases")
}

/// The key row's `(state, recovery_point, fencing_token, lease held now)`.
pub(crate) async fn key_state(pool: &PgPool, key: &str) -> (String, String, i64, bool) {
    sqlx::query_as(
        "SELECT state, recovery_point, fencing_token, \
                coalesce(locked_until > clock_timestamp(), false) \
           FROM idem_keys WHERE idem_key = $1",
    )
    .bind(key)
    .fetch_one(pool)
    .await
    .expect("read the key row")
}

/// A point in a test handler where an attempt can be held until the test lets it go,
/// and which tells the test when an attempt got there.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    reached: Notify,
    open: Notify,
}

impl Gate {
    /// In the handler: announce arrival, then wait for [`Gate::open`].
    pub(crate) async fn pass(&self) {
        self.reached.notify_one();
        self.open.notified().await;
    }

    /// In the handler: announce arrival and never go on; the test drops the request, as
    /// if the process had died there (nothing runs after, the lease is not released).
    pub(crate) async fn die(&self) {
        self.reached.notify_one();
        std::future::pending::<()>().await;
    }

    /// In the test: wait until an attempt reached the gate.
    pub(crate) async fn reached(&self) {
        tokio::time::timeout(Duration::from_secs(10), self.reached.notified())
            .await
            .expect("the attempt reached the gate");
    }

    /// In the test: let the waiting attempt go on.
    pub(crate) fn open(&self) {
        self.open.notify_one();
    }
}

/// The example binaries, one per web framework, serving the same HTTP contract: a
/// black-box test runs against each (see [`example_tests!`]).
pub(crate) const EXAMPLES: [&str; 2] = ["orders", "orders-axum"];

/// Instantiates each `async fn name(example: &'static str)` once per binary of
/// [`EXAMPLES`], as `orders::name` and `orders_axum::name`, so one test command runs both.
#[allow(unused_macros)] // Each test file uses the part of this module it needs.
macro_rules! example_tests {
    ($($name:ident),+ $(,)?) => {
        mod orders {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name("orders").await;
                }
            )+
        }
        mod orders_axum {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name("orders-axum").await;
                }
            )+
        }
    };
}
#[allow(unused_imports)]
pub(crate) use example_tests;

/// Builds the example of the test's framework (`orders` on actix-web, `orders-axum` on
/// axum: [`Framework::example`]; a no-op when `cargo test` already did) and returns its
/// path.
pub(crate) fn example_binary() -> PathBuf {
    example_binary_of(Framework::current().example())
}

/// Builds the example binary `name`, one of [`EXAMPLES`], and returns its path.
///
/// `cargo test --test <name>` alone does not build examples, and a binary left in
/// `target/debug/examples` may be stale, so ask cargo for the current ones (all of them
/// in one build), once per test process.
pub(crate) fn example_binary_of(name: &str) -> PathBuf {
    static BINARIES: OnceLock<Vec<(String, PathBuf)>> = OnceLock::new();
    let binaries = BINARIES.get_or_init(build_examples);
    binaries
        .iter()
        .find(|(example, _)| example == name)
        .map(|(_, path)| path.clone())
        .unwrap_or_else(|| panic!("{name} is not one of {EXAMPLES:?}"))
}

fn build_examples() -> Vec<(String, PathBuf)> {
    let mut args = vec!["build", "--message-format=json"];
    for example in EXAMPLES {
        args.extend(["--example", example]);
    }
    let output = std::process::Command::new(env!("CARGO"))
        .args(&args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo build --example ..");
    assert!(output.status.success(), "cargo {} failed", args.join(" "));
    let stdout = String::from_utf8(output.stdout).expect("cargo's messages are UTF-8");
    let built: Vec<(String, PathBuf)> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .filter_map(|message| {
            let name = message["target"]["name"].as_str()?;
            let path = message["executable"].as_str()?;
            EXAMPLES
                .contains(&name)
                .then(|| (name.to_owned(), PathBuf::from(path)))
        })
        .collect();
    assert_eq!(
        built.len(),
        EXAMPLES.len(),
        "cargo reported each example's executable: {built:?}"
    );
    built
}

/// A free loopback port, distinct from the others this test process picked
/// ([`idem_testkit::free_port`]).
pub(crate) fn free_port() -> u16 {
    idem_testkit::free_port().expect("a free local port")
}

/// How long the example may take to migrate and start listening.
const STARTUP: Duration = Duration::from_secs(30);

/// The example binary, running.
pub(crate) struct Example {
    pub(crate) child: Child,
    pub(crate) base: String,
}

impl Example {
    /// Starts the example on `database_url` and a free port, with `IDEM_EXAMPLE_CRASH_AFTER=crash_after` if
    /// given, and waits for it to say it serves. The child is killed when dropped.
    /// The binary is the test's framework's ([`Framework::example`]): a test run through
    /// `support::backend_tests!` or `support::both_frameworks!` starts each in turn.
    pub(crate) async fn start(database_url: &str, crash_after: Option<&str>) -> Self {
        Self::start_as(Framework::current().example(), database_url, crash_after).await
    }

    /// [`start`](Self::start) for the example binary `example`, one of [`EXAMPLES`].
    pub(crate) async fn start_as(
        example: &str,
        database_url: &str,
        crash_after: Option<&str>,
    ) -> Self {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut command = Command::new(example_binary_of(example));
        command
            .env("DATABASE_URL", database_url)
            .env("BIND_ADDR", &addr)
            .env_remove("IDEM_EXAMPLE_CRASH_AFTER")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(point) = crash_after {
            command.env("IDEM_EXAMPLE_CRASH_AFTER", point);
        }
        let mut child = command.spawn().expect("spawn the example");
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
        Self {
            child,
            base: format!("http://{addr}"),
        }
    }

    /// Waits for the process to end by itself; returns its stderr.
    pub(crate) async fn died(mut self) -> (std::process::ExitStatus, String) {
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .expect("the example exits")
            .expect("wait for the example");
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr).await;
        }
        (status, stderr)
    }

    pub(crate) async fn stop(mut self) {
        self.child.kill().await.expect("stop the example");
    }
}

/// A response over HTTP taken apart.
#[derive(Debug)]
pub(crate) struct HttpReply {
    pub(crate) status: u16,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl HttpReply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("text header"))
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "body is not JSON ({error}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub(crate) async fn send(request: reqwest::RequestBuilder) -> reqwest::Result<HttpReply> {
    let response = request.send().await?;
    Ok(HttpReply {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.bytes().await?.to_vec(),
    })
}

/// `POST {base}/payments` as `account` with `key` and `body`.
pub(crate) fn post_payment(
    client: &reqwest::Client,
    base: &str,
    account: i64,
    key: &str,
    body: &str,
) -> reqwest::RequestBuilder {
    client
        .post(format!("{base}/payments"))
        .header("x-account-id", account.to_string())
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(body.to_owned())
}

/// A payment body in compact form.
pub(crate) fn payment_json(amount_cents: i64, currency: &str) -> String {
    serde_json::json!({ "amount_cents": amount_cents, "currency": currency }).to_string()
}

/// Counts rows of one of the example's tables (or idem's).
pub(crate) async fn count<DB: crate::support::TestBackend>(
    pool: &sqlx::Pool<DB>,
    table: &str,
) -> i64 {
    DB::scalar(pool, &format!("SELECT count(*) FROM {table}")).await
}

/// A test handler's answer, written once for both frameworks: its status and a text (or
/// JSON) body. The test handlers' logic returns it, so an actix-web handler and its axum
/// twin answer alike and a test asserts the same things of either.
#[derive(Debug)]
pub(crate) struct Answer {
    status: u16,
    json: bool,
    body: String,
}

impl Answer {
    /// `status` with a text body.
    pub(crate) fn text(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            json: false,
            body: body.into(),
        }
    }

    /// `status` with `value` as `application/json`.
    pub(crate) fn json(status: u16, value: &Value) -> Self {
        Self {
            status,
            json: true,
            body: value.to_string(),
        }
    }
}

impl actix_web::Responder for Answer {
    type Body = actix_web::body::BoxBody;

    fn respond_to(self, _: &actix_web::HttpRequest) -> actix_web::HttpResponse {
        let status = actix_web::http::StatusCode::from_u16(self.status).expect("a status");
        let mut response = actix_web::HttpResponse::build(status);
        if self.json {
            response.content_type("application/json");
        }
        response.body(self.body)
    }
}

impl axum::response::IntoResponse for Answer {
    fn into_response(self) -> axum::response::Response {
        let status = axum::http::StatusCode::from_u16(self.status).expect("a status");
        let mut response = (status, self.body).into_response();
        if self.json {
            response.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static("application/json"),
            );
        }
        response
    }
}
