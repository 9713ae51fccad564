//! `#[idempotent(store = redis, ..)]` on both frameworks, against a `redis-server` the
//! test starts: the protocol's answers with the keys in Redis (first request, replay,
//! 422, 400, a stored 4xx, a released 5xx), a takeover that resumes after a recorded step
//! without calling the provider again, a stale holder refused, and Redis's faults (down,
//! a script error, a value idem did not write) answered as errors, never as a success.

use crate::support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{HttpResponse, post, web};
use axum::{Extension, Router};
use futures_util::future::join;
use idem::phased::PhaseError;
use idem::redis::{RedisIdem, RedisStore, Steps};
use idem_testkit::RedisServer;
use serde_json::{Value, json};
use support::app::Account;
use support::{ALICE, BOB, Reply, TestApp, post};
use tokio::sync::Notify;

/// The fake outside provider: it dedupes by the derived key, as a payment or messaging
/// provider does by its idempotency key, and counts the calls it acted on.
#[derive(Debug, Default)]
struct Provider {
    /// Messages sent, by the idempotency key the caller gave.
    sent: Mutex<HashMap<String, String>>,
    /// Calls that reached the provider, duplicates included.
    calls: AtomicUsize,
    /// Handler entries, so a test sees whether the handler ran at all.
    entries: AtomicUsize,
    /// Told when a handler holds after its step (`"hold": true`).
    held: Notify,
    /// Lets the held handler go on.
    release: Notify,
}

impl Provider {
    fn send(&self, key: &str, to: &str) -> String {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut sent = self.sent.lock().unwrap();
        let next = sent.len() + 1;
        sent.entry(key.to_owned())
            .or_insert_with(|| format!("msg-{next}-to-{to}"))
            .clone()
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn entries(&self) -> usize {
        self.entries.load(Ordering::SeqCst)
    }
}

/// The handler's answer, the same on both frameworks.
struct Answer {
    status: u16,
    body: Value,
}

/// One notification: a step that calls the provider with a derived key; then, as the
/// body says, a hold (for the tests of concurrency and takeover), a failure after the
/// step (5xx), or a 404 for an unknown recipient before any step.
async fn notify(
    steps: &mut Steps,
    provider: &Provider,
    body: &Value,
) -> Result<Answer, PhaseError> {
    let attempt = provider.entries.fetch_add(1, Ordering::SeqCst) + 1;
    let to = body["to"].as_str().unwrap_or_default().to_owned();
    if to == "nobody" {
        return Ok(Answer {
            status: 404,
            body: json!({ "error": "no such recipient" }),
        });
    }
    let resumed = steps.recovery_point().map(str::to_owned);
    let key = steps.derived_key("send");
    let message: String = steps
        .run("sent", async || {
            Ok::<_, PhaseError>(provider.send(&key, &to))
        })
        .await?;
    if body["fail_after_step"] == true && attempt == 1 {
        return Ok(Answer {
            status: 502,
            body: json!({ "error": "the provider's answer was lost" }),
        });
    }
    if body["hold"] == true && attempt == 1 {
        provider.held.notify_one();
        provider.release.notified().await;
    }
    Ok(Answer {
        status: 201,
        body: json!({ "message": message, "attempt": attempt, "resumed": resumed }),
    })
}

mod actix_handlers {
    use super::*;

    impl actix_web::Responder for Answer {
        type Body = actix_web::body::BoxBody;

        fn respond_to(self, _: &actix_web::HttpRequest) -> HttpResponse {
            HttpResponse::build(actix_web::http::StatusCode::from_u16(self.status).unwrap())
                .json(self.body)
        }
    }

    #[post("/notifications")]
    #[idem::idempotent(scope = account, store = redis, lease = "1s", retention = "24h")]
    pub(super) async fn notifications(
        account: Account,
        steps: Steps,
        provider: web::Data<Provider>,
        body: web::Json<Value>,
    ) -> Result<Answer, actix_web::Error> {
        let _ = account;
        Ok(notify(&mut steps, &provider, &body).await?)
    }

    #[post("/notifications/other")]
    #[idem::idempotent(scope = account, store = redis, lease = "1s", retention = "24h")]
    pub(super) async fn other(
        account: Account,
        steps: Steps,
        provider: web::Data<Provider>,
        body: web::Json<Value>,
    ) -> Result<Answer, actix_web::Error> {
        let _ = account;
        Ok(notify(&mut steps, &provider, &body).await?)
    }
}

mod axum_handlers {
    use super::*;
    use axum::response::{IntoResponse, Response};

    impl IntoResponse for Answer {
        fn into_response(self) -> Response {
            let status = http::StatusCode::from_u16(self.status).unwrap();
            (status, axum::Json(self.body)).into_response()
        }
    }

    /// A `PhaseError` as idem's problem answer (idem answers its own in its place).
    pub(super) struct Failed(PhaseError);

    impl From<PhaseError> for Failed {
        fn from(error: PhaseError) -> Self {
            Self(error)
        }
    }

    impl IntoResponse for Failed {
        fn into_response(self) -> Response {
            (http::StatusCode::INTERNAL_SERVER_ERROR, self.0.to_string()).into_response()
        }
    }

    #[idem::axum::idempotent(scope = account, store = redis, lease = "1s", retention = "24h")]
    async fn notifications(
        account: Account,
        steps: Steps,
        Extension(provider): Extension<Arc<Provider>>,
        axum::Json(body): axum::Json<Value>,
    ) -> Result<Answer, Failed> {
        let _ = account;
        Ok(notify(&mut steps, &provider, &body).await?)
    }

    #[idem::axum::idempotent(scope = account, store = redis, lease = "1s", retention = "24h")]
    async fn other(
        account: Account,
        steps: Steps,
        Extension(provider): Extension<Arc<Provider>>,
        axum::Json(body): axum::Json<Value>,
    ) -> Result<Answer, Failed> {
        let _ = account;
        Ok(notify(&mut steps, &provider, &body).await?)
    }

    pub(super) fn routes() -> Router {
        Router::new()
            .route("/notifications", axum::routing::post(notifications))
            .route("/notifications/other", axum::routing::post(other))
    }
}

/// The test's Redis, the provider and the application on the test's framework.
struct Setup {
    redis: RedisServer,
    provider: Arc<Provider>,
    app: TestApp,
}

async fn setup() -> Setup {
    let redis = RedisServer::start();
    let store = RedisStore::connect(&redis.url())
        .await
        .expect("connect to the test's redis-server");
    let redis_idem = RedisIdem::new(store);
    let provider = Arc::new(Provider::default());
    let app = {
        let (axum_idem, provider) = (redis_idem.clone(), Arc::clone(&provider));
        let data = web::Data::from(Arc::clone(&provider));
        support::own_service(
            move |cfg| {
                cfg.app_data(redis_idem)
                    .app_data(data)
                    .service(actix_handlers::notifications)
                    .service(actix_handlers::other);
            },
            move || {
                axum_handlers::routes()
                    .layer(Extension(provider))
                    .layer(Extension(axum_idem))
            },
        )
        .await
    };
    Setup {
        redis,
        provider,
        app,
    }
}

fn send(account: i64, key: &str, body: &Value) -> support::TestRequest {
    post("/notifications", account, key, &body.to_string())
        .insert_header(("content-type", "application/json"))
}

async fn call(app: &TestApp, account: i64, key: &str, body: &Value) -> Reply {
    app.call(send(account, key, body)).await
}

/// The first request runs the step once; a retry replays the same answer, marked, and
/// the provider is not called again. Another account's same key is its own request.
async fn first_request_then_replay() {
    let s = setup().await;
    let body = json!({ "to": "ann" });
    let first = call(&s.app, ALICE, "k1", &body).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.replayed());
    let again = call(&s.app, ALICE, "k1", &body).await;
    again.assert_replay_of(&first);
    assert_eq!(s.provider.calls(), 1);
    assert_eq!(s.provider.entries(), 1, "a replay runs no handler");

    let bob = call(&s.app, BOB, "k1", &body).await;
    assert_eq!(bob.status, 201);
    assert!(!bob.replayed());
    assert_ne!(bob.json()["message"], first.json()["message"]);
    assert_eq!(s.provider.calls(), 2);
}

/// The same key with another body, or on another path, is 422 with what differs; the
/// stored answer is untouched.
async fn mismatch_is_422() {
    let s = setup().await;
    let first = call(&s.app, ALICE, "k1", &json!({ "to": "ann" })).await;
    assert_eq!(first.status, 201);
    let body = call(&s.app, ALICE, "k1", &json!({ "to": "bea" })).await;
    let problem = body.assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(problem["mismatch"], "body");
    let path = s
        .app
        .call(
            post(
                "/notifications/other",
                ALICE,
                "k1",
                &json!({ "to": "ann" }).to_string(),
            )
            .insert_header(("content-type", "application/json")),
        )
        .await;
    let problem = path.assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(problem["mismatch"], "method_or_path");
    call(&s.app, ALICE, "k1", &json!({ "to": "ann" }))
        .await
        .assert_replay_of(&first);
    assert_eq!(s.provider.entries(), 1);
}

/// No key, or a bad one: 400 before anything reaches Redis or the handler.
async fn bad_key_is_400() {
    let s = setup().await;
    let body = json!({ "to": "ann" }).to_string();
    let missing = s
        .app
        .call(
            support::post_unkeyed("/notifications", ALICE, &body)
                .insert_header(("content-type", "application/json")),
        )
        .await;
    missing.assert_idem_problem(400, "idempotency-key-missing");
    let bad = s
        .app
        .call(
            support::post_raw_key("/notifications", ALICE, b"", &body)
                .insert_header(("content-type", "application/json")),
        )
        .await;
    bad.assert_idem_problem(400, "idempotency-key-invalid");
    assert_eq!(s.provider.entries(), 0);
    let keys: Vec<String> = redis_keys(&s.redis).await;
    assert!(keys.is_empty(), "nothing written to Redis: {keys:?}");
}

/// A deterministic 4xx is the key's answer: replayed, the handler not run again.
async fn stored_4xx_is_replayed() {
    let s = setup().await;
    let body = json!({ "to": "nobody" });
    let first = call(&s.app, ALICE, "k1", &body).await;
    assert_eq!(first.status, 404);
    call(&s.app, ALICE, "k1", &body)
        .await
        .assert_replay_of(&first);
    assert_eq!(s.provider.entries(), 1);
}

/// A 5xx after a recorded step releases the lease and keeps the step: the retry takes
/// over at once, resumes after the step without calling the provider again, and its
/// answer is the key's.
async fn released_5xx_resumes_without_a_second_call() {
    let s = setup().await;
    let body = json!({ "to": "ann", "fail_after_step": true });
    let failed = call(&s.app, ALICE, "k1", &body).await;
    assert_eq!(failed.status, 502, "{failed:?}");
    assert!(!failed.replayed());
    let retry = call(&s.app, ALICE, "k1", &body).await;
    assert_eq!(retry.status, 201, "{retry:?}");
    assert_eq!(retry.json()["resumed"], "sent");
    assert_eq!(retry.json()["attempt"], 2);
    assert_eq!(
        s.provider.calls(),
        1,
        "the step's recorded output was reused"
    );
    call(&s.app, ALICE, "k1", &body)
        .await
        .assert_replay_of(&retry);
}

/// While an attempt holds the lease, a duplicate gets 409 with `Retry-After`, and the
/// holder's answer is then the key's.
async fn duplicate_while_held_is_409() {
    let s = setup().await;
    let body = json!({ "to": "ann", "hold": true });
    let (first, second) = join(call(&s.app, ALICE, "k1", &body), async {
        s.provider.held.notified().await;
        let second = call(&s.app, ALICE, "k1", &body).await;
        s.provider.release.notify_one();
        second
    })
    .await;
    second.assert_idem_problem(409, "request-in-progress");
    assert!(second.header("retry-after").is_some());
    assert_eq!(first.status, 201);
    call(&s.app, ALICE, "k1", &body)
        .await
        .assert_replay_of(&first);
    assert_eq!(s.provider.calls(), 1);
}

/// A holder stopped past its lease is taken over: the retry resumes after the recorded
/// step and answers; the old holder's completion is then refused (409), and the key keeps
/// the retry's answer.
async fn stale_holder_is_refused() {
    let s = setup().await;
    let body = json!({ "to": "ann", "hold": true });
    let (first, retry) = join(call(&s.app, ALICE, "k1", &body), async {
        s.provider.held.notified().await;
        // The holder's lease (1 s) runs out while it is held: poll until Redis says so.
        let lease = redis_key(ALICE, "k1", ":lease");
        wait_until_gone(&s.redis, &lease).await;
        let retry = call(&s.app, ALICE, "k1", &body).await;
        s.provider.release.notify_one();
        retry
    })
    .await;
    assert_eq!(retry.status, 201, "{retry:?}");
    assert_eq!(retry.json()["resumed"], "sent");
    first.assert_idem_problem(409, "request-in-progress");
    call(&s.app, ALICE, "k1", &body)
        .await
        .assert_replay_of(&retry);
    assert_eq!(s.provider.calls(), 1);
}

/// Redis down: 503 with `Retry-After`, and the handler never runs.
async fn redis_down_is_503() {
    let mut s = setup().await;
    s.redis.kill();
    let reply = call(&s.app, ALICE, "k1", &json!({ "to": "ann" })).await;
    reply.assert_idem_problem(503, "storage-unavailable");
    assert!(reply.header("retry-after").is_some());
    assert_eq!(s.provider.entries(), 0);
}

/// A script's error (here the key's fencing counter is not a number, so its `INCR`
/// fails) is 503, never a success, and nothing runs.
async fn script_error_is_503() {
    let s = setup().await;
    redis_set(&s.redis, &redis_key(ALICE, "k1", ":token"), "not a number").await;
    let reply = call(&s.app, ALICE, "k1", &json!({ "to": "ann" })).await;
    reply.assert_idem_problem(503, "storage-unavailable");
    assert_eq!(s.provider.entries(), 0);
}

/// A value under the key's record that idem did not write is a 500, never a replay, and
/// nothing runs.
async fn foreign_value_is_500() {
    let s = setup().await;
    redis_set(&s.redis, &redis_key(ALICE, "k1", ""), "someone else's").await;
    let reply = call(&s.app, ALICE, "k1", &json!({ "to": "ann" })).await;
    reply.assert_idem_problem(500, "key-value-foreign");
    assert!(!reply.replayed());
    assert_eq!(s.provider.entries(), 0);
}

support::both_frameworks!(
    #[actix_web::test]
    first_request_then_replay,
    #[actix_web::test]
    mismatch_is_422,
    #[actix_web::test]
    bad_key_is_400,
    #[actix_web::test]
    stored_4xx_is_replayed,
    #[actix_web::test]
    released_5xx_resumes_without_a_second_call,
    #[actix_web::test]
    duplicate_while_held_is_409,
    #[actix_web::test]
    stale_holder_is_refused,
    #[actix_web::test]
    redis_down_is_503,
    #[actix_web::test]
    script_error_is_503,
    #[actix_web::test]
    foreign_value_is_500,
);

/// The Redis key of `account`'s `key`, plus `suffix` (`""` for the record).
fn redis_key(account: i64, key: &str, suffix: &str) -> String {
    format!("idem:{{{account}:{key}}}{suffix}")
}

async fn connection(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .expect("a Redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the test's redis-server")
}

async fn redis_set(redis: &RedisServer, key: &str, value: &str) {
    let mut conn = connection(redis).await;
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(&mut conn)
        .await
        .expect("SET");
}

async fn redis_keys(redis: &RedisServer) -> Vec<String> {
    let mut conn = connection(redis).await;
    redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .expect("KEYS")
}

/// Polls until Redis no longer has `key` (its TTL ran out), with no bound on the time
/// it takes: Redis's own clock decides.
async fn wait_until_gone(redis: &RedisServer, key: &str) {
    let mut conn = connection(redis).await;
    loop {
        let exists: bool = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("EXISTS");
        if !exists {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
