//! `idem::SignedWebhook` as an axum extractor, under `#[idem::axum::idempotent(key =
//! header("webhook-id"))]`, over real HTTP on PostgreSQL and SQLite: the axum twins of
//! tests/webhook.rs. A verified delivery runs the handler once and every redelivery (and
//! concurrent duplicate) gets its stored answer; a delivery that does not verify, or has
//! no event id, is refused before anything is stored; the same id with another body is a
//! 422; and one sender's event is never taken for another sender's event of the same id.

mod axum_support;
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Extension, Json, Router};
use axum_support::{Reply, Server, axum_backend_tests};
use futures_util::future::join_all;
use serde_json::{Value, json};
use support::{Env, TestBackend};

const TENANT_A: &str = "tenant-a";
const TENANT_B: &str = "tenant-b";
const SECRET_A: &str = "whsec_dGVuYW50LWEtc2lnbnMtd2l0aC10aGlz";
const SECRET_B: &str = "whsec_dGVuYW50LWItaGFzLWl0cy1vd24=";

fn verifier(sender: &str) -> idem::WebhookVerifier {
    let secret = if sender == TENANT_A {
        SECRET_A
    } else {
        SECRET_B
    };
    idem::WebhookVerifier::new(sender, secret).expect("base64 secrets")
}

/// How many times a handler body ran.
#[derive(Clone, Default)]
struct Counter(Arc<AtomicUsize>);

#[derive(serde::Deserialize)]
struct Event {
    id: String,
    data: Charge,
}

#[derive(serde::Deserialize)]
struct Charge {
    charge_id: String,
    amount_cents: i64,
}

macro_rules! receivers {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::*;

            /// Records a charge event once per event id and sender.
            #[idem::axum::idempotent(scope = sender, key = header("webhook-id"), retention = "5d")]
            pub(crate) async fn charge_event(
                State(counter): State<Counter>,
                sender: idem::SignedWebhook,
                tx: idem::Tx<'_, $db>,
                Json(event): Json<Event>,
            ) -> Result<Json<Value>, (StatusCode, String)> {
                if event.id != sender.id() {
                    return Err((StatusCode::UNPROCESSABLE_ENTITY, "id mismatch".to_owned()));
                }
                let run = counter.0.fetch_add(1, Ordering::SeqCst) + 1;
                sqlx::query(
                    "INSERT INTO charge_events (event_id, charge_id, amount_cents, currency) \
                     VALUES ($1, $2, $3, 'EUR')",
                )
                .bind(&event.id)
                .bind(&event.data.charge_id)
                .bind(event.data.amount_cents)
                .execute(&mut *tx)
                .await
                .map_err(|error| (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()))?;
                // Slow enough that concurrent duplicates find the key held.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                Ok(Json(json!({
                    "event_id": event.id,
                    "sender": sender.sender(),
                    "run": run,
                })))
            }

            /// The same receiver as a plain handler behind `IdempotencyLayer`, scoped by
            /// the `SignedWebhook` the layer verifies.
            pub(crate) async fn layered_event(
                State(counter): State<Counter>,
                sender: idem::SignedWebhook,
                mut tx: idem::Tx<'static, $db>,
                Json(event): Json<Event>,
            ) -> Result<Json<Value>, (StatusCode, String)> {
                let run = counter.0.fetch_add(1, Ordering::SeqCst) + 1;
                sqlx::query(
                    "INSERT INTO charge_events (event_id, charge_id, amount_cents, currency) \
                     VALUES ($1, $2, $3, 'EUR')",
                )
                .bind(&event.id)
                .bind(&event.data.charge_id)
                .bind(event.data.amount_cents)
                .execute(&mut *tx)
                .await
                .map_err(|error| (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()))?;
                Ok(Json(json!({ "event_id": event.id, "sender": sender.sender(), "run": run })))
            }

            pub(crate) fn layered(sender: &str) -> axum::routing::MethodRouter<Counter> {
                post(layered_event)
                    .route_layer(idem::axum::IdempotencyLayer::<$db, idem::SignedWebhook>::new(
                        &LAYERED_EVENT,
                    ))
                    .route_layer(Extension(verifier(sender)))
            }
        }
    };
}

static LAYERED_EVENT: idem::Policy =
    idem::Policy::new("layered_event", module_path!(), "sender", 5 * 86_400)
        .with_key(idem::KeySource::Header("webhook-id"));

receivers!(on_postgres, sqlx::Postgres);
receivers!(on_sqlite, sqlx::Sqlite);

trait AxumBackend: TestBackend {
    /// The receiver's route, with the verifier of `sender`.
    fn receiver(sender: &str) -> axum::routing::MethodRouter<Counter>;
    /// The layered receiver's route, with the verifier of `sender`.
    fn layered(sender: &str) -> axum::routing::MethodRouter<Counter>;
}

impl AxumBackend for sqlx::Postgres {
    fn receiver(sender: &str) -> axum::routing::MethodRouter<Counter> {
        post(on_postgres::charge_event).route_layer(Extension(verifier(sender)))
    }

    fn layered(sender: &str) -> axum::routing::MethodRouter<Counter> {
        on_postgres::layered(sender)
    }
}

impl AxumBackend for sqlx::Sqlite {
    fn receiver(sender: &str) -> axum::routing::MethodRouter<Counter> {
        post(on_sqlite::charge_event).route_layer(Extension(verifier(sender)))
    }

    fn layered(sender: &str) -> axum::routing::MethodRouter<Counter> {
        on_sqlite::layered(sender)
    }
}

/// Two senders, each posting to its own route with its own secret.
async fn start<DB: AxumBackend>(env: &Env<DB>) -> (Server, Counter) {
    let runs = Counter::default();
    let app = Router::new()
        .route("/webhooks/a", DB::receiver(TENANT_A))
        .route("/webhooks/b", DB::receiver(TENANT_B))
        .route("/webhooks/layered", DB::layered(TENANT_A))
        .layer(Extension(env.idem()))
        .with_state(runs.clone());
    (Server::start(app).await, runs)
}

fn now() -> i64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    i64::try_from(secs).expect("a timestamp in range")
}

fn event(id: &str, charge: &str, amount_cents: i64) -> String {
    json!({ "id": id, "data": { "charge_id": charge, "amount_cents": amount_cents } }).to_string()
}

/// A delivery of `body` as event `id` to `path`, signed now by `sender`.
fn delivery(
    server: &Server,
    path: &str,
    sender: &str,
    id: &str,
    body: &str,
) -> reqwest::RequestBuilder {
    let timestamp = now();
    server
        .post(path)
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header(
            "webhook-signature",
            verifier(sender).sign(id, timestamp, body.as_bytes()),
        )
        .body(body.to_owned())
}

async fn charge_events<DB: TestBackend>(env: &Env<DB>, event_id: &str) -> i64 {
    DB::scalar(
        &env.pool,
        &format!("SELECT count(*) FROM charge_events WHERE event_id = '{event_id}'"),
    )
    .await
}

async fn a_verified_event_runs_once_and_every_redelivery_replays<DB: AxumBackend>() {
    const PARALLEL: usize = 12;
    let env = Env::<DB>::open().await;
    let (server, runs) = start(&env).await;
    let body = event("evt_1", "ch_1", 4200);
    let replies: Vec<Reply> = join_all(
        (0..PARALLEL)
            .map(|_| Server::send(delivery(&server, "/webhooks/a", TENANT_A, "evt_1", &body))),
    )
    .await;
    let originals: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status == 200 && !r.replayed())
        .collect();
    assert_eq!(originals.len(), 1, "one delivery runs: {replies:#?}");
    let original = originals[0].clone();
    assert_eq!(
        original.json(),
        json!({ "event_id": "evt_1", "sender": TENANT_A, "run": 1 })
    );
    for reply in &replies {
        match reply.status {
            200 if reply.replayed() => reply.assert_replay_of(&original),
            200 => {}
            409 => {
                reply.assert_problem(409, "request-in-progress");
            }
            other => panic!("a concurrent delivery gets 200 or 409, not {other}: {reply:?}"),
        }
    }
    // The sender's later redeliveries, each signed anew with its own timestamp.
    for _ in 0..3 {
        Server::send(delivery(&server, "/webhooks/a", TENANT_A, "evt_1", &body))
            .await
            .assert_replay_of(&original);
    }
    assert_eq!(runs.0.load(Ordering::SeqCst), 1, "the handler ran once");
    assert_eq!(charge_events(&env, "evt_1").await, 1, "one effect");
    assert_eq!(
        env.key_rows().await,
        [(
            format!("webhook:{TENANT_A}"),
            "evt_1".to_owned(),
            "completed".to_owned(),
            Some(200)
        )],
        "the key is the event id, scoped by the sender"
    );
}

async fn unverified_or_unkeyed_deliveries_are_refused_before_any_claim<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let (server, runs) = start(&env).await;
    let body = event("evt_2", "ch_2", 100);

    // Signed with another secret (the other sender's).
    let forged = delivery(&server, "/webhooks/a", TENANT_B, "evt_2", &body);
    let problem = Server::send(forged)
        .await
        .assert_problem(401, "webhook-signature-invalid");
    assert!(
        problem["detail"].as_str().unwrap().contains("no signature"),
        "{problem}"
    );

    // The body altered after signing.
    let t = now();
    let altered = server
        .post("/webhooks/a")
        .header("content-type", "application/json")
        .header("webhook-id", "evt_2")
        .header("webhook-timestamp", t.to_string())
        .header(
            "webhook-signature",
            verifier(TENANT_A).sign("evt_2", t, body.as_bytes()),
        )
        .body(event("evt_2", "ch_2", 1));
    Server::send(altered)
        .await
        .assert_problem(401, "webhook-signature-invalid");

    // A captured delivery sent again an hour later with its old signature.
    let stale = now() - 3600;
    let replayed = server
        .post("/webhooks/a")
        .header("content-type", "application/json")
        .header("webhook-id", "evt_2")
        .header("webhook-timestamp", stale.to_string())
        .header(
            "webhook-signature",
            verifier(TENANT_A).sign("evt_2", stale, body.as_bytes()),
        )
        .body(body.clone());
    let problem = Server::send(replayed)
        .await
        .assert_problem(401, "webhook-signature-invalid");
    assert!(
        problem["detail"].as_str().unwrap().contains("timestamp"),
        "{problem}"
    );

    // No signature at all.
    let unsigned = server
        .post("/webhooks/a")
        .header("content-type", "application/json")
        .header("webhook-id", "evt_2")
        .body(body.clone());
    Server::send(unsigned)
        .await
        .assert_problem(401, "webhook-signature-invalid");

    // No webhook-id.
    let unkeyed = server
        .post("/webhooks/a")
        .header("content-type", "application/json")
        .header("webhook-timestamp", now().to_string())
        .header("webhook-signature", "v1,AAAA")
        .body(body.clone());
    let problem = Server::send(unkeyed)
        .await
        .assert_problem(400, "event-id-missing");
    assert!(
        problem["detail"].as_str().unwrap().contains("webhook-id"),
        "{problem}"
    );

    assert_eq!(runs.0.load(Ordering::SeqCst), 0, "the handler never ran");
    assert_eq!(env.keys().await, 0, "no key was stored");
    assert_eq!(charge_events(&env, "evt_2").await, 0);

    // The same delivery, signed right: it runs.
    let good = Server::send(delivery(&server, "/webhooks/a", TENANT_A, "evt_2", &body)).await;
    assert_eq!(good.status, 200, "{good:?}");
    assert_eq!(charge_events(&env, "evt_2").await, 1);
}

async fn the_same_event_id_with_another_body_is_a_422_and_the_first_effect_stands<
    DB: AxumBackend,
>() {
    let env = Env::<DB>::open().await;
    let (server, runs) = start(&env).await;
    let first_body = event("evt_3", "ch_3", 500);
    let first = Server::send(delivery(
        &server,
        "/webhooks/a",
        TENANT_A,
        "evt_3",
        &first_body,
    ))
    .await;
    assert_eq!(first.status, 200, "{first:?}");
    let other = Server::send(delivery(
        &server,
        "/webhooks/a",
        TENANT_A,
        "evt_3",
        &event("evt_3", "ch_3", 999_999),
    ))
    .await;
    let problem = other.assert_problem(422, "idempotency-key-reused");
    assert_eq!(problem["mismatch"], "body", "{problem}");
    // The detail names where this endpoint's key comes from, not an absent header.
    let detail = problem["detail"].as_str().expect("a detail");
    assert!(detail.contains("webhook-id"), "{detail}");
    assert!(!detail.contains("Idempotency-Key"), "{detail}");
    Server::send(delivery(
        &server,
        "/webhooks/a",
        TENANT_A,
        "evt_3",
        &first_body,
    ))
    .await
    .assert_replay_of(&first);
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);
    let amount = DB::scalar(
        &env.pool,
        "SELECT amount_cents FROM charge_events WHERE event_id = 'evt_3'",
    )
    .await;
    assert_eq!(amount, 500, "the first delivery's effect stands");
}

async fn another_senders_event_of_the_same_id_is_its_own_event<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let (server, runs) = start(&env).await;
    let body = event("evt_4", "ch_4", 100);
    let from_a = Server::send(delivery(&server, "/webhooks/a", TENANT_A, "evt_4", &body)).await;
    assert_eq!(from_a.status, 200, "{from_a:?}");
    assert!(!from_a.replayed());
    // Sender B's event has the same id: not a replay of A's, nor a 422.
    let from_b = Server::send(delivery(&server, "/webhooks/b", TENANT_B, "evt_4", &body)).await;
    assert_eq!(from_b.status, 200, "{from_b:?}");
    assert!(!from_b.replayed(), "B's event is not A's: {from_b:?}");
    assert_eq!(from_b.json()["sender"], TENANT_B);
    // Each replays its own answer.
    Server::send(delivery(&server, "/webhooks/a", TENANT_A, "evt_4", &body))
        .await
        .assert_replay_of(&from_a);
    Server::send(delivery(&server, "/webhooks/b", TENANT_B, "evt_4", &body))
        .await
        .assert_replay_of(&from_b);
    assert_eq!(runs.0.load(Ordering::SeqCst), 2);
    assert_eq!(charge_events(&env, "evt_4").await, 2);
    let mut scopes: Vec<String> = env.key_rows().await.into_iter().map(|row| row.0).collect();
    scopes.sort();
    assert_eq!(
        scopes,
        [format!("webhook:{TENANT_A}"), format!("webhook:{TENANT_B}")]
    );
}

/// Behind `IdempotencyLayer`, with `SignedWebhook` as the layer's scope: a forged delivery
/// is refused before any claim, a verified one runs once and replays.
async fn the_layer_verifies_and_keys_a_webhook_as_the_attribute_does<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let (server, runs) = start(&env).await;
    let body = event("evt_5", "ch_5", 300);
    Server::send(delivery(
        &server,
        "/webhooks/layered",
        TENANT_B,
        "evt_5",
        &body,
    ))
    .await
    .assert_problem(401, "webhook-signature-invalid");
    assert_eq!(env.keys().await, 0, "no key for a forged delivery");
    let first = Server::send(delivery(
        &server,
        "/webhooks/layered",
        TENANT_A,
        "evt_5",
        &body,
    ))
    .await;
    assert_eq!(first.status, 200, "{first:?}");
    assert!(!first.replayed());
    Server::send(delivery(
        &server,
        "/webhooks/layered",
        TENANT_A,
        "evt_5",
        &body,
    ))
    .await
    .assert_replay_of(&first);
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);
    assert_eq!(charge_events(&env, "evt_5").await, 1);
    assert_eq!(
        env.key_rows().await,
        [(
            format!("webhook:{TENANT_A}"),
            "evt_5".to_owned(),
            "completed".to_owned(),
            Some(200)
        )]
    );
}

/// A `webhook-id` is the id as signed: `"evt_q"` in quotes is another event than `evt_q`
/// (the header is no Structured Field string, so its quotes are part of the id).
async fn a_quoted_webhook_id_is_its_own_event<DB: AxumBackend>() {
    let env = Env::<DB>::open().await;
    let (server, runs) = start(&env).await;
    for id in ["evt_q", "\"evt_q\""] {
        let body = event(id, "ch_q", 100);
        let reply = Server::send(delivery(&server, "/webhooks/a", TENANT_A, id, &body)).await;
        assert_eq!(reply.status, 200, "{id}: {reply:?}");
        assert!(!reply.replayed(), "{id} is its own event: {reply:?}");
    }
    assert_eq!(runs.0.load(Ordering::SeqCst), 2);
    let mut keys: Vec<String> = env.key_rows().await.into_iter().map(|row| row.1).collect();
    keys.sort();
    assert_eq!(keys, ["\"evt_q\"", "evt_q"]);
}

axum_backend_tests!(
    a_quoted_webhook_id_is_its_own_event,
    the_layer_verifies_and_keys_a_webhook_as_the_attribute_does,
    a_verified_event_runs_once_and_every_redelivery_replays,
    unverified_or_unkeyed_deliveries_are_refused_before_any_claim,
    the_same_event_id_with_another_body_is_a_422_and_the_first_effect_stands,
    another_senders_event_of_the_same_id_is_its_own_event,
);
