//! The outbox: a message written in a phase (or in the single transaction) exists once
//! however the request is replayed or taken over, is not written at all when its
//! transaction rolls back, and the relay delivers every message at least once, with the
//! same id on every delivery, and stops when asked.

use crate::phased_support;
use crate::support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{post, web};
use axum::extract::Query;
use axum::{Extension, Router};
use futures_util::future::select;
use idem::outbox::{Message, Relay};
use idem::phased::PhaseError;
use phased_support::{Answer, Gate, PAST_LEASE};
use serde_json::json;
use sqlx::PgPool;
use support::app::Account;
use support::{ALICE, Env, TestApp, post};

#[derive(Debug, Default)]
struct Control {
    attempts: AtomicUsize,
    /// A fresh attempt dies here when the request asks for it (`?die=1`).
    gate: Gate,
}

/// Enqueues one message in the phase `queued`; answers with the message's id. A fresh
/// attempt dies after the phase when `die`.
async fn enqueue_in_phase(
    account: i64,
    phases: &mut idem::Phases<sqlx::Postgres>,
    die: bool,
    control: &Control,
) -> Result<Answer, PhaseError> {
    let attempt = control.attempts.fetch_add(1, Ordering::SeqCst) + 1;
    let id: String = phases
        .run("queued", async |mut tx| {
            let payload = json!({ "account": account, "attempt": attempt });
            Ok::<_, PhaseError>(tx.enqueue("test", &payload).await?)
        })
        .await?;
    // Only a fresh attempt dies: the one that takes over goes on.
    if die && phases.recovery_point().is_none() {
        control.gate.die().await;
    }
    Ok(Answer::text(201, id))
}

/// The single-transaction form enqueues too; `fail` answers 500 after enqueueing.
async fn enqueue_single(account: i64, tx: &mut idem::Tx<'_, sqlx::Postgres>, fail: bool) -> Answer {
    let id = tx
        .enqueue("single", &json!({ "account": account }))
        .await
        .expect("enqueue");
    if fail {
        Answer::text(500, "failed after enqueueing")
    } else {
        Answer::text(201, id)
    }
}

/// The handlers on actix-web; `?die=1` and `?fail=1` (any query) ask for the failure.
mod actix_handlers {
    use super::*;

    #[post("/test/enqueue")]
    #[idem::idempotent(scope = account, lease = "1s")]
    pub(super) async fn enqueue_in_phase(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
        query: web::Query<Vec<(String, String)>>,
        control: web::Data<Control>,
    ) -> Result<Answer, PhaseError> {
        super::enqueue_in_phase(account.id(), &mut phases, !query.is_empty(), &control).await
    }

    #[post("/test/enqueue-single")]
    #[idem::idempotent(scope = account)]
    pub(super) async fn enqueue_single(
        account: Account,
        tx: idem::Tx<'_, sqlx::Postgres>,
        query: web::Query<Vec<(String, String)>>,
    ) -> Answer {
        super::enqueue_single(account.id(), &mut tx, !query.is_empty()).await
    }
}

/// The same handlers on axum.
mod axum_handlers {
    use super::*;

    #[idem::axum::idempotent(scope = account, lease = "1s")]
    async fn enqueue_in_phase(
        account: Account,
        phases: idem::Phases<sqlx::Postgres>,
        Extension(control): Extension<Arc<Control>>,
        Query(query): Query<Vec<(String, String)>>,
    ) -> Result<Answer, PhaseError> {
        super::enqueue_in_phase(account.id(), &mut phases, !query.is_empty(), &control).await
    }

    #[idem::axum::idempotent(scope = account)]
    async fn enqueue_single(
        account: Account,
        tx: idem::Tx<'_, sqlx::Postgres>,
        Query(query): Query<Vec<(String, String)>>,
    ) -> Answer {
        super::enqueue_single(account.id(), &mut tx, !query.is_empty()).await
    }

    pub(super) fn routes() -> Router {
        Router::new()
            .route("/test/enqueue", axum::routing::post(enqueue_in_phase))
            .route("/test/enqueue-single", axum::routing::post(enqueue_single))
    }
}

async fn app(env: &Env, control: &web::Data<Control>) -> TestApp {
    let actix_control = control.clone();
    let axum_control = control.clone().into_inner();
    support::service_with_twin(
        &env.idem(),
        move |cfg| {
            cfg.app_data(actix_control)
                .service(actix_handlers::enqueue_in_phase)
                .service(actix_handlers::enqueue_single);
        },
        move || axum_handlers::routes().layer(Extension(axum_control)),
    )
    .await
}

/// `(id, topic, delivered)` of every message, in write order.
async fn outbox(pool: &PgPool) -> Vec<(String, String, bool)> {
    sqlx::query_as("SELECT id::text, topic, delivered_at IS NOT NULL FROM idem_outbox ORDER BY seq")
        .fetch_all(pool)
        .await
        .expect("read the outbox")
}

fn text(reply: &support::Reply) -> String {
    String::from_utf8(reply.body.to_vec()).expect("text")
}

async fn a_replay_or_a_takeover_never_enqueues_twice() {
    let env = Env::new().await;
    let control = web::Data::new(Control::default());
    let app = app(&env, &control).await;

    let created = app.call(post("/test/enqueue", ALICE, "once", "{}")).await;
    assert_eq!(created.status, 201);
    let replayed = app.call(post("/test/enqueue", ALICE, "once", "{}")).await;
    replayed.assert_replay_of(&created);
    assert_eq!(
        outbox(&env.pool).await,
        [(text(&created), "test".to_owned(), false)],
        "one message, whose id the handler got from enqueue"
    );

    // The first attempt commits `queued`, then dies; the retry takes over.
    let request = || post("/test/enqueue?die=1", ALICE, "crash", "{}");
    let died = select(app.call(request()), Box::pin(control.gate.reached())).await;
    assert!(
        matches!(died, futures_util::future::Either::Right(_)),
        "it died"
    );
    drop(died);
    tokio::time::sleep(PAST_LEASE).await;
    let resumed = app.call(request()).await;
    assert_eq!(resumed.status, 201, "{:?}", resumed.body);
    assert!(!resumed.replayed());
    let messages = outbox(&env.pool).await;
    assert_eq!(messages.len(), 2, "one message per request: {messages:?}");
    assert_eq!(
        messages[1].0,
        text(&resumed),
        "the takeover got the first attempt's message"
    );
    let payload: serde_json::Value =
        sqlx::query_scalar("SELECT payload::jsonb FROM idem_outbox WHERE id = $1::uuid")
            .bind(&messages[1].0)
            .fetch_one(&env.pool)
            .await
            .expect("payload");
    // Handler runs: "once", the attempt that died, the one that took over.
    assert_eq!(control.attempts.load(Ordering::SeqCst), 3);
    assert_eq!(
        payload,
        json!({ "account": ALICE, "attempt": 2 }),
        "written by the attempt that died, never by the one that took over"
    );
}

async fn a_rolled_back_transaction_leaves_no_message() {
    let env = Env::new().await;
    let app = app(&env, &web::Data::new(Control::default())).await;

    let failed = app
        .call(post("/test/enqueue-single?fail=1", ALICE, "single", "{}"))
        .await;
    assert_eq!(failed.status, 500);
    assert!(
        outbox(&env.pool).await.is_empty(),
        "rolled back with the key"
    );
    let created = app
        .call(post("/test/enqueue-single", ALICE, "single-ok", "{}"))
        .await;
    assert_eq!(created.status, 201);
    assert_eq!(
        outbox(&env.pool).await,
        [(text(&created), "single".to_owned(), false)]
    );
}

/// What a relay handler saw: `(message id, attempt)` per delivery.
type Seen = Arc<Mutex<Vec<(String, u32)>>>;

async fn wait_until_delivered(pool: &PgPool, messages: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let delivered = outbox(pool).await.iter().filter(|m| m.2).count();
        if delivered == messages {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{delivered} of {messages} delivered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn the_relay_delivers_at_least_once_with_a_stable_id() {
    let env = Env::new().await;
    let app = app(&env, &web::Data::new(Control::default())).await;
    let mut ids = Vec::new();
    for key in ["m1", "m2", "m3"] {
        let reply = app.call(post("/test/enqueue", ALICE, key, "{}")).await;
        assert_eq!(reply.status, 201);
        ids.push(text(&reply));
    }

    // Each message's first delivery fails (an error, or a panic for the second), so
    // each is delivered again, later, with the same id.
    let seen: Seen = Arc::default();
    let relay = Relay::new(env.pool.clone())
        .poll_interval(Duration::from_millis(20))
        .retry_backoff(Duration::from_millis(50), Duration::from_millis(200))
        .spawn({
            let seen = Arc::clone(&seen);
            let panicky = ids[1].clone();
            move |message: Message| {
                let seen = Arc::clone(&seen);
                let panicky = panicky.clone();
                async move {
                    seen.lock()
                        .unwrap()
                        .push((message.id().to_owned(), message.attempt()));
                    assert_eq!(message.topic(), "test");
                    let payload: serde_json::Value = message.payload_as().expect("JSON");
                    assert_eq!(payload["account"], ALICE);
                    match message.attempt() {
                        1 if message.id() == panicky => panic!("the consumer panics once"),
                        1 => Err("the consumer is down"),
                        _ => Ok(()),
                    }
                }
            }
        });
    wait_until_delivered(&env.pool, 3).await;
    relay.stop().await;

    let seen = seen.lock().unwrap().clone();
    let mut deliveries: HashMap<&str, Vec<u32>> = HashMap::new();
    for (id, attempt) in &seen {
        deliveries.entry(id.as_str()).or_default().push(*attempt);
    }
    assert_eq!(deliveries.len(), 3, "{seen:?}");
    for id in &ids {
        assert_eq!(
            deliveries.get(id.as_str()),
            Some(&vec![1, 2]),
            "message {id}: failed once, then delivered, under one id: {seen:?}"
        );
    }
    let errors: Vec<Option<String>> =
        sqlx::query_scalar("SELECT last_error FROM idem_outbox ORDER BY seq")
            .fetch_all(&env.pool)
            .await
            .expect("errors");
    assert_eq!(errors, [None, None, None], "cleared once delivered");
}

async fn a_stopped_relay_delivers_nothing_more_and_two_relays_share_the_work() {
    let env = Env::new().await;
    let app = app(&env, &web::Data::new(Control::default())).await;
    let seen: Seen = Arc::default();
    let handler = {
        let seen = Arc::clone(&seen);
        move |message: Message| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock()
                    .unwrap()
                    .push((message.id().to_owned(), message.attempt()));
                // Slow enough that both relays are busy at once.
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok::<_, std::convert::Infallible>(())
            }
        }
    };
    for i in 0..12 {
        let reply = app
            .call(post("/test/enqueue", ALICE, &format!("k{i}"), "{}"))
            .await;
        assert_eq!(reply.status, 201);
    }
    let relays = [
        Relay::new(env.pool.clone())
            .batch_size(2)
            .poll_interval(Duration::from_millis(20))
            .spawn(handler.clone()),
        Relay::new(env.pool.clone())
            .batch_size(2)
            .poll_interval(Duration::from_millis(20))
            .spawn(handler.clone()),
    ];
    wait_until_delivered(&env.pool, 12).await;
    for relay in relays {
        relay.stop().await;
    }
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 12, "each message delivered once: {seen:?}");
        assert!(seen.iter().all(|(_, attempt)| *attempt == 1));
    }

    let reply = app
        .call(post("/test/enqueue", ALICE, "after-stop", "{}"))
        .await;
    assert_eq!(reply.status, 201);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(seen.lock().unwrap().len(), 12, "no delivery after stop");
    let undelivered = outbox(&env.pool).await.into_iter().filter(|m| !m.2).count();
    assert_eq!(undelivered, 1);
}

support::both_frameworks!(
    #[actix_web::test]
    a_replay_or_a_takeover_never_enqueues_twice,
    #[actix_web::test]
    a_rolled_back_transaction_leaves_no_message,
    #[actix_web::test]
    the_relay_delivers_at_least_once_with_a_stable_id,
    #[actix_web::test]
    a_stopped_relay_delivers_nothing_more_and_two_relays_share_the_work,
);
