//! The example's `POST /notifications` (keys in Redis, an effect only at the provider) on
//! both frameworks, against a `redis-server` the test starts: the first request is 201,
//! its retry a replay and the provider is called once; the example's problems for a bad
//! body; `idem::testing`'s checks that need no key table; and without the Redis config the
//! route is absent while the rest of the example answers as before.

use crate::support;

use actix_web::App;
use idem::redis::RedisStore;
use idem::testing::{Endpoint, Failed, Passed};
use idem_testkit::RedisServer;
use serde_json::{Value, json};
use sqlx::Sqlite;
use support::app::domain::notifications::Notifications;
use support::app::notifications as actix_notifications;
use support::axum_app::notifications as axum_notifications;
use support::{ALICE, BOB, Env, Framework, TestApp, order_json, post, post_order};

/// The test's Redis (kept running while the test holds it), the example's notification
/// service on it, and the application on the test's framework with only that route.
async fn setup() -> (RedisServer, Notifications, TestApp) {
    let redis = RedisServer::start();
    let store = RedisStore::connect(&redis.url())
        .await
        .expect("connect to the test's redis-server");
    let notifications = Notifications::new(store, idem::Settings::default());
    let app = {
        let (actix, axum) = (notifications.clone(), notifications.clone());
        support::own_service(
            move |cfg| actix_notifications::configure(cfg, Some(&actix)),
            move || axum_notifications::router(Some(&axum)),
        )
        .await
    };
    (redis, notifications, app)
}

fn send(account: i64, key: &str, body: &Value) -> support::TestRequest {
    post("/notifications", account, key, &body.to_string())
        .insert_header(("content-type", "application/json"))
}

/// The first request sends once (201, the message); its retry is the same answer byte for
/// byte with `Idempotent-Replayed: true`, and the provider was called once. Another
/// account's same key is its own request, with its own derived key.
async fn first_request_then_replay() {
    let (_redis, notifications, app) = setup().await;
    let body = json!({ "to": "ann@example.com", "text": "your order shipped" });

    let first = app.call(send(ALICE, "n-1", &body)).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.replayed());
    assert_eq!(first.header("content-type"), Some("application/json"));
    let message = first.json();
    assert_eq!(message["id"], "msg_1");
    assert_eq!(message["account_id"], ALICE);
    assert_eq!(message["to"], "ann@example.com");
    assert_eq!(message["text"], "your order shipped");

    for _ in 0..2 {
        let again = app.call(send(ALICE, "n-1", &body)).await;
        again.assert_replay_of(&first);
        assert_eq!(again.status, 201);
    }
    assert_eq!(
        notifications.notifier.calls(),
        1,
        "a replay calls no provider"
    );
    assert_eq!(notifications.notifier.sent(), 1);

    let bob = app.call(send(BOB, "n-1", &body)).await;
    assert_eq!(bob.status, 201);
    assert!(!bob.replayed());
    assert_eq!(bob.json()["id"], "msg_2");
    assert_eq!(notifications.notifier.sent(), 2);
}

/// A body that is not a notification is the example's problem, before the key is claimed:
/// the same key then sends once with a good body.
async fn bad_bodies_are_problems_and_leave_the_key_unused() {
    let (_redis, notifications, app) = setup().await;
    let not_json = post("/notifications", ALICE, "n-2", "{")
        .insert_header(("content-type", "application/json"));
    app.call(not_json)
        .await
        .assert_app_problem(400, "malformed-body");
    let text =
        post("/notifications", ALICE, "n-2", "{}").insert_header(("content-type", "text/plain"));
    app.call(text)
        .await
        .assert_app_problem(415, "unsupported-media-type");
    for body in [
        json!({ "to": "ann" }),
        json!({ "to": "", "text": "hi" }),
        json!({ "to": "ann", "text": "hi", "cc": "bea" }),
    ] {
        app.call(send(ALICE, "n-2", &body))
            .await
            .assert_app_problem(422, "invalid-notification");
    }
    assert_eq!(notifications.notifier.calls(), 0);
    let sent = app
        .call(send(ALICE, "n-2", &json!({ "to": "ann", "text": "hi" })))
        .await;
    assert_eq!(sent.status, 201, "{sent:?}");
    assert!(!sent.replayed());
    assert_eq!(notifications.notifier.calls(), 1);
}

/// `idem::testing` on the endpoint: concurrency, replay, missing key and mismatch, the
/// effect being the provider's messages. Its other checks (`transient_failure`,
/// `crash_resume`, `expiry`) read and age the key through `Endpoint::store`, which takes
/// the SQL pool of an `Idem`; a key in Redis has no such pool, so `all` reports them as
/// not run.
async fn harness_checks_pass() {
    let (_redis, notifications, _) = setup().await;
    let effect = notifications.notifier.clone();
    let endpoint = Endpoint::post("/notifications")
        .header(support::app::ACCOUNT_HEADER, &ALICE.to_string())
        .json(json!({ "to": "ann", "text": "your order shipped" }))
        .mismatch_json(json!({ "to": "ann", "text": "your order was cancelled" }))
        .effect(move || {
            let sent = i64::try_from(effect.sent()).expect("a small count");
            async move { sent }
        });
    let passed = on_app(&notifications, &endpoint).await.unwrap();
    let passed = passed.to_string();
    assert!(
        passed.contains("ran concurrency, replay, missing_key, mismatch"),
        "{passed}"
    );
    assert!(passed.contains("not run: transient_failure"), "{passed}");
}

/// `endpoint.all` on the notification route of the test's framework, as the harness takes
/// an application (an actix-web service or an axum router).
async fn on_app(notifications: &Notifications, endpoint: &Endpoint) -> Result<Passed, Failed> {
    match Framework::current() {
        Framework::Actix => {
            let app = actix_web::test::init_service(
                App::new()
                    .configure(|cfg| actix_notifications::configure(cfg, Some(notifications))),
            )
            .await;
            endpoint.all(&app).await
        }
        Framework::Axum => {
            endpoint
                .all(&axum_notifications::router(Some(notifications)))
                .await
        }
    }
}

/// Without the Redis config (no `REDIS_URL`) the example is built as it is today: orders
/// are served, and `POST /notifications` is a plain 404 that reaches no provider.
async fn absent_without_redis() {
    let env = Env::<Sqlite>::open().await;
    let idem = env.idem();
    let app = {
        let axum_idem = idem.clone();
        support::own_service(
            move |cfg| {
                support::app::configure(cfg, &idem);
                actix_notifications::configure(cfg, None);
            },
            move || support::axum_app::router(&axum_idem).merge(axum_notifications::router(None)),
        )
        .await
    };
    let order = app
        .call(post_order(ALICE, "o-1", &order_json("tea", 1, 100)))
        .await;
    order.assert_created();
    let absent = app
        .call(send(ALICE, "n-1", &json!({ "to": "ann", "text": "hi" })))
        .await;
    assert_eq!(absent.status, 404, "{absent:?}");
    assert!(
        absent.body.is_empty(),
        "the framework's own 404: {absent:?}"
    );
}

support::both_frameworks!(
    #[actix_web::test]
    first_request_then_replay,
    #[actix_web::test]
    bad_bodies_are_problems_and_leave_the_key_unused,
    #[actix_web::test]
    harness_checks_pass,
    #[actix_web::test]
    absent_without_redis,
);
