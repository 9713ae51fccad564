//! The example's webhook receiver, `POST /webhooks/provider`: its key is the event's
//! `webhook-id` and its scope the sender verified by its Standard Webhooks signature.
//! Every event is recorded once however often, and however concurrently, it is delivered;
//! a delivery that does not verify, or has no usable id, is refused before anything is
//! stored; the same id with another body is a 422 and the first delivery's effect stands.
//! And a handler keyed by a field of its JSON body. The receiver's tests run on actix-web
//! and on axum (the axum binary's receiver, `examples/orders-axum/webhooks.rs`), each on
//! both databases; the JSON-keyed handler's on both frameworks, on SQLite.

/// The axum binary's receiver, the twin of [`webhooks`].
#[path = "../examples/orders-axum/webhooks.rs"]
mod axum_webhooks;
#[path = "../examples/orders/openapi.rs"]
mod example_openapi;
mod support;
#[path = "../examples/orders/webhooks.rs"]
mod webhooks;

use std::time::{SystemTime, UNIX_EPOCH};

use actix_web::{HttpResponse, post, web};
use futures_util::future::join_all;
use serde_json::json;
use support::TestRequest;
// The axum binary's `webhooks.rs` finds the shared files at `crate::domain`, as in its
// binary (the actix one reaches them through `crate::app::domain`).
use support::domain;
use support::{Env, Reply, TestApp, TestBackend};

/// What both receivers name as `crate::app`: the actix example's app, as in its binary,
/// plus the two items of the axum example's app its receiver uses. The names do not
/// overlap, so one module stands in for both binaries' `app`.
mod app {
    pub(crate) use super::support::app::*;
    pub(crate) use super::support::axum_app::{extract, methods};
}

/// A database both receivers run on.
trait Receiving: TestBackend + webhooks::WebhookStore + axum_webhooks::WebhookRoutes {}

impl<DB: TestBackend + webhooks::WebhookStore + axum_webhooks::WebhookRoutes> Receiving for DB {}

const PARALLEL: usize = 20;

fn signer() -> idem::WebhookVerifier {
    idem::WebhookVerifier::new(webhooks::SENDER, webhooks::DEFAULT_SECRET)
        .expect("the example's secret is base64")
}

fn now() -> i64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    i64::try_from(secs).expect("a timestamp in range")
}

/// A `charge.succeeded` event's body.
fn event(id: &str, charge: &str, amount_cents: i64) -> String {
    json!({
        "id": id,
        "type": "charge.succeeded",
        "data": { "charge_id": charge, "amount_cents": amount_cents, "currency": "EUR" },
    })
    .to_string()
}

/// A delivery of `body` as event `id`, signed now by the provider, to `uri`.
fn delivery(uri: &str, id: &str, body: &str) -> TestRequest {
    let timestamp = now();
    TestRequest::post()
        .uri(uri)
        .insert_header(("content-type", "application/json"))
        .insert_header(("webhook-id", id))
        .insert_header(("webhook-timestamp", timestamp.to_string()))
        .insert_header((
            "webhook-signature",
            signer().sign(id, timestamp, body.as_bytes()),
        ))
        .set_payload(body.to_owned())
}

/// The example's application with its webhook receiver, on the test's framework.
async fn receiver<DB: Receiving>(env: &Env<DB>) -> TestApp {
    support::service_with_twin(
        &env.idem(),
        |cfg| webhooks::configure::<DB>(cfg, signer()),
        || axum_webhooks::router::<DB>(signer()),
    )
    .await
}

async fn charge_events<DB: TestBackend>(env: &Env<DB>, event_id: &str) -> i64 {
    DB::scalar(
        &env.pool,
        &format!("SELECT count(*) FROM charge_events WHERE event_id = '{event_id}'"),
    )
    .await
}

async fn all_charge_events<DB: TestBackend>(env: &Env<DB>) -> i64 {
    DB::scalar(&env.pool, "SELECT count(*) FROM charge_events").await
}

fn assert_recorded(reply: &Reply, id: &str) {
    assert_eq!(
        reply.status,
        200,
        "status; body: {}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.json(), json!({ "event_id": id, "recorded": true }));
}

async fn twenty_concurrent_deliveries_record_the_event_once<DB>()
where
    DB: Receiving,
{
    let env = Env::<DB>::open().await;
    let app = receiver(&env).await;
    let body = event("evt_1", "ch_1", 4200);
    let replies: Vec<Reply> =
        join_all((0..PARALLEL).map(|_| app.call(delivery(webhooks::PATH, "evt_1", &body)))).await;

    let originals: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status == 200 && !r.replayed())
        .collect();
    assert_eq!(
        originals.len(),
        1,
        "one delivery runs the handler: {replies:#?}"
    );
    assert_recorded(originals[0], "evt_1");
    for reply in &replies {
        match reply.status {
            200 if reply.replayed() => reply.assert_replay_of(originals[0]),
            200 => {}
            409 => {
                reply.assert_idem_problem(409, "request-in-progress");
            }
            other => {
                panic!("a concurrent delivery is answered 2xx or 409, not {other}: {reply:#?}")
            }
        }
    }
    assert_eq!(charge_events(&env, "evt_1").await, 1, "one effect");

    // The provider's later redeliveries, each signed anew, get the stored answer.
    for _ in 0..3 {
        let again = app.call(delivery(webhooks::PATH, "evt_1", &body)).await;
        again.assert_replay_of(originals[0]);
    }
    assert_eq!(charge_events(&env, "evt_1").await, 1, "still one effect");
    assert_eq!(
        env.key_rows().await,
        [(
            format!("webhook:{}", webhooks::SENDER),
            "evt_1".to_owned(),
            "completed".to_owned(),
            Some(200)
        )],
        "the key is the event id, scoped by the sender"
    );
}

/// The receiver fails after its insert and before the commit (the test hook panics
/// there, in idem's transaction): nothing is stored, and the provider's redelivery
/// records the event, once.
async fn a_delivery_that_crashed_before_its_commit_is_processed_once_on_redelivery<DB>()
where
    DB: Receiving,
{
    let env = Env::<DB>::open().await;
    let app = receiver(&env).await;
    let body = event("evt_crash", "ch_7", 700);
    let crashed = app
        .call(delivery(
            &format!("{}?fail=panic", webhooks::PATH),
            "evt_crash",
            &body,
        ))
        .await;
    crashed.assert_idem_problem(500, "handler-panicked");
    assert_eq!(all_charge_events(&env).await, 0, "the insert rolled back");
    assert_eq!(env.keys().await, 0, "and so did the key");

    let redelivered = app.call(delivery(webhooks::PATH, "evt_crash", &body)).await;
    assert!(!redelivered.replayed(), "the redelivery runs the handler");
    assert_recorded(&redelivered, "evt_crash");
    let again = app.call(delivery(webhooks::PATH, "evt_crash", &body)).await;
    again.assert_replay_of(&redelivered);
    assert_eq!(charge_events(&env, "evt_crash").await, 1, "recorded once");
}

async fn unverified_or_unkeyed_deliveries_are_refused_and_nothing_is_stored<DB>()
where
    DB: Receiving,
{
    let env = Env::<DB>::open().await;
    let app = receiver(&env).await;
    let body = event("evt_2", "ch_2", 100);

    // Signed with another secret.
    let forger =
        idem::WebhookVerifier::new(webhooks::SENDER, "c29tZW9uZSBlbHNlLCBub3QgdGhlIHNlbmRlcg==")
            .unwrap();
    let t = now();
    let forged = delivery(webhooks::PATH, "evt_2", &body)
        .insert_header((
            "webhook-signature",
            forger.sign("evt_2", t, body.as_bytes()),
        ))
        .insert_header(("webhook-timestamp", t.to_string()));
    let reply = app.call(forged).await;
    let problem = reply.assert_idem_problem(401, "webhook-signature-invalid");
    assert!(
        problem["detail"].as_str().unwrap().contains("no signature"),
        "{problem}"
    );

    // A body altered after signing.
    let altered = delivery(webhooks::PATH, "evt_2", &body).set_payload(event("evt_2", "ch_2", 1));
    app.call(altered)
        .await
        .assert_idem_problem(401, "webhook-signature-invalid");

    // A captured delivery replayed an hour later with its old signature.
    let stale = now() - 3600;
    let replayed = delivery(webhooks::PATH, "evt_2", &body)
        .insert_header(("webhook-timestamp", stale.to_string()))
        .insert_header((
            "webhook-signature",
            signer().sign("evt_2", stale, body.as_bytes()),
        ));
    let problem = app
        .call(replayed)
        .await
        .assert_idem_problem(401, "webhook-signature-invalid");
    assert!(
        problem["detail"].as_str().unwrap().contains("timestamp"),
        "{problem}"
    );

    // No signature at all.
    let unsigned = TestRequest::post()
        .uri(webhooks::PATH)
        .insert_header(("content-type", "application/json"))
        .insert_header(("webhook-id", "evt_2"))
        .set_payload(body.clone());
    app.call(unsigned)
        .await
        .assert_idem_problem(401, "webhook-signature-invalid");

    // No webhook-id header.
    let unkeyed = TestRequest::post()
        .uri(webhooks::PATH)
        .insert_header(("content-type", "application/json"))
        .insert_header(("webhook-timestamp", now().to_string()))
        .insert_header(("webhook-signature", "v1,AAAA"))
        .set_payload(body.clone());
    let problem = app
        .call(unkeyed)
        .await
        .assert_idem_problem(400, "event-id-missing");
    assert!(
        problem["detail"].as_str().unwrap().contains("webhook-id"),
        "{problem}"
    );

    // An id over the limit, correctly signed: the signature verifies, the key does not.
    let long = "e".repeat(idem::MAX_KEY_LEN + 1);
    let body_long = event(&long, "ch_3", 100);
    let problem = app
        .call(delivery(webhooks::PATH, &long, &body_long))
        .await
        .assert_idem_problem(400, "event-id-invalid");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("256 characters"),
        "{problem}"
    );

    assert_eq!(env.keys().await, 0, "no key was stored");
    assert_eq!(all_charge_events(&env).await, 0, "no event was recorded");
}

async fn the_same_event_id_with_another_body_is_a_422_and_the_first_effect_stands<DB>()
where
    DB: Receiving,
{
    let env = Env::<DB>::open().await;
    let app = receiver(&env).await;
    let first = app
        .call(delivery(
            webhooks::PATH,
            "evt_3",
            &event("evt_3", "ch_3", 500),
        ))
        .await;
    assert_recorded(&first, "evt_3");
    let other = app
        .call(delivery(
            webhooks::PATH,
            "evt_3",
            &event("evt_3", "ch_3", 999_999),
        ))
        .await;
    let problem = other.assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(problem["mismatch"], "body", "{problem}");
    assert_eq!(charge_events(&env, "evt_3").await, 1);
    let amount = DB::scalar(
        &env.pool,
        "SELECT amount_cents FROM charge_events WHERE event_id = 'evt_3'",
    )
    .await;
    assert_eq!(amount, 500, "the first delivery's effect stands");
    // And the original delivery still replays.
    app.call(delivery(
        webhooks::PATH,
        "evt_3",
        &event("evt_3", "ch_3", 500),
    ))
    .await
    .assert_replay_of(&first);
}

/// A sender taken as verified, for the JSON-keyed handler (whose subject is the key
/// source, not the signature).
struct Stripe;

impl actix_web::FromRequest for Stripe {
    type Error = actix_web::Error;
    type Future = std::future::Ready<Result<Self, Self::Error>>;

    fn from_request(_: &actix_web::HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        std::future::ready(Ok(Self))
    }
}

impl idem::ScopeKey for Stripe {
    fn scope_key(&self) -> std::borrow::Cow<'_, str> {
        "stripe".into()
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Stripe {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        _: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self)
    }
}

/// Stripe-style: the event's id is the body's `id`.
#[post("/webhooks/json")]
#[idem::idempotent(scope = sender, key = json("id"), retention = "3d")]
async fn json_keyed(
    sender: Stripe,
    tx: idem::Tx<'_, sqlx::Sqlite>,
    body: web::Json<serde_json::Value>,
) -> HttpResponse {
    let _ = (&sender, &tx);
    HttpResponse::Ok().json(json!({ "seen": body["id"] }))
}

/// `json_keyed` on axum.
#[idem::axum::idempotent(scope = sender, key = json("id"), retention = "3d")]
async fn json_keyed_on_axum(
    sender: Stripe,
    tx: idem::Tx<'_, sqlx::Sqlite>,
    axum::Json(body): axum::Json<serde_json::Value>,
) -> axum::Json<serde_json::Value> {
    let _ = (&sender, &tx);
    axum::Json(json!({ "seen": body["id"] }))
}

async fn a_handler_keyed_by_a_json_field_replays_by_it() {
    let env = Env::<sqlx::Sqlite>::open().await;
    let app = support::service_with_twin(
        &env.idem(),
        |cfg| {
            cfg.service(json_keyed);
        },
        || axum::Router::new().route("/webhooks/json", axum::routing::post(json_keyed_on_axum)),
    )
    .await;
    let send = |body: &str| {
        TestRequest::post()
            .uri("/webhooks/json")
            .insert_header(("content-type", "application/json"))
            .set_payload(body.to_owned())
    };
    let first = app.call(send(r#"{"id":"evt_9","n":1}"#)).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert!(!first.replayed());
    // The same event again, its members in another order: the same body, a replay.
    app.call(send(r#"{"n":1,"id":"evt_9"}"#))
        .await
        .assert_replay_of(&first);
    // An integer id is a key too.
    let numbered = app.call(send(r#"{"id":42}"#)).await;
    assert_eq!(numbered.status, 200);
    assert!(!numbered.replayed());
    // The string "42" is the same id as the integer 42 (an id is its text; a sender's
    // ids have one JSON type): here with another body, so a 422, not a replay.
    app.call(send(r#"{"id":"42"}"#))
        .await
        .assert_idem_problem(422, "idempotency-key-reused");
    // A JSON string is the id exactly: quotes inside it are part of the id, and spaces
    // are refused rather than trimmed into another event's id.
    let quoted = app.call(send(r#"{"id":"\"evt_9\""}"#)).await;
    assert_eq!(quoted.status, 200, "{quoted:?}");
    assert!(
        !quoted.replayed(),
        "a quoted id is its own event: {quoted:?}"
    );
    app.call(send(r#"{"id":" evt_9"}"#))
        .await
        .assert_idem_problem(400, "event-id-invalid");
    app.call(send(r#"{"n":1}"#))
        .await
        .assert_idem_problem(400, "event-id-missing");
    app.call(send(r#"{"id":[1]}"#))
        .await
        .assert_idem_problem(400, "event-id-invalid");
    let mut keys: Vec<String> = env.key_rows().await.into_iter().map(|row| row.1).collect();
    keys.sort();
    assert_eq!(keys, ["\"evt_9\"", "42", "evt_9"]);
}

/// A receiver outside `#[idempotent]`: `SignedWebhook` alone, reading the body itself.
async fn plain_receiver(hook: idem::SignedWebhook) -> HttpResponse {
    HttpResponse::Ok().json(json!({ "id": hook.id(), "bytes": hook.body().len() }))
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).expect("in memory");
    encoder.finish().expect("in memory")
}

/// A gzip-encoded delivery signed over the bytes sent (as Standard Webhooks signs: the
/// body as transmitted) verifies the same way with `SignedWebhook` alone and under
/// `#[idempotent]`; and one signed over the decoded body fails on both.
async fn a_gzip_delivery_verifies_over_its_raw_bytes_on_both_paths<DB>()
where
    DB: Receiving,
{
    let env = Env::<DB>::open().await;
    let app = support::service_with(&env.idem(), |cfg| {
        webhooks::configure::<DB>(cfg, signer());
        cfg.service(
            web::resource("/webhooks/plain")
                .app_data(signer())
                .route(web::post().to(plain_receiver)),
        );
    })
    .await;
    let body = event("evt_gz", "ch_gz", 100);
    let sent = gzip(body.as_bytes());
    let send = |uri: &str, signed_over: &[u8]| {
        let timestamp = now();
        TestRequest::post()
            .uri(uri)
            .insert_header(("content-type", "application/json"))
            .insert_header(("content-encoding", "gzip"))
            .insert_header(("webhook-id", "evt_gz"))
            .insert_header(("webhook-timestamp", timestamp.to_string()))
            .insert_header((
                "webhook-signature",
                signer().sign("evt_gz", timestamp, signed_over),
            ))
            .set_payload(sent.clone())
    };
    let alone = app.call(send("/webhooks/plain", &sent)).await;
    assert_eq!(alone.status, 200, "SignedWebhook alone: {alone:?}");
    assert_eq!(alone.json()["bytes"], sent.len(), "the body as received");
    let under_idem = app.call(send(webhooks::PATH, &sent)).await;
    assert_recorded(&under_idem, "evt_gz");
    for uri in ["/webhooks/plain", webhooks::PATH] {
        app.call(send(uri, body.as_bytes()))
            .await
            .assert_idem_problem(401, "webhook-signature-invalid");
    }
}

/// A captured delivery resent first with a query, then the sender's own: the query is not
/// signed, so it does not make another request. Before the fingerprint covered only what
/// was signed, the resent copy took the event's id and the sender's delivery, and every
/// retry of it, got 422 for the whole retention.
async fn a_captured_delivery_resent_with_a_query_does_not_lock_the_sender_out<DB>()
where
    DB: Receiving,
{
    let env = Env::<DB>::open().await;
    let app = receiver(&env).await;
    let body = event("evt_q", "ch_q", 700);
    // A query the receiver accepts (its test hook), with no effect on what it does.
    let captured = delivery(&format!("{}?delay_ms=0", webhooks::PATH), "evt_q", &body);
    let first = app.call(captured).await;
    assert_recorded(&first, "evt_q");
    let genuine = app.call(delivery(webhooks::PATH, "evt_q", &body)).await;
    genuine.assert_replay_of(&first);
    assert_eq!(charge_events(&env, "evt_q").await, 1, "the event ran once");
    // The body is signed: another body under the same id is still refused.
    app.call(delivery(
        webhooks::PATH,
        "evt_q",
        &event("evt_q", "ch_q", 701),
    ))
    .await
    .assert_idem_problem(422, "idempotency-key-reused");
}

/// A caller of the application's own whose scope value is the sender's name.
struct Tenant;

impl actix_web::FromRequest for Tenant {
    type Error = actix_web::Error;
    type Future = std::future::Ready<Result<Self, Self::Error>>;

    fn from_request(_: &actix_web::HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        std::future::ready(Ok(Self))
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Tenant {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        _: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self)
    }
}

impl idem::ScopeKey for Tenant {
    fn scope_key(&self) -> std::borrow::Cow<'_, str> {
        webhooks::SENDER.into()
    }
}

const NOTES: &str = "/tenant/notes";

/// An endpoint of the tenant's, writing nothing.
#[idem::idempotent(scope = tenant)]
async fn tenant_note<DB: idem::Backend>(tenant: Tenant, tx: idem::Tx<'_, DB>) -> HttpResponse {
    let _ = (&tenant, &tx);
    HttpResponse::Created().json(json!({ "note": "kept" }))
}

macro_rules! tenant_notes_on_axum {
    ($($module:ident: $db:ty),+) => {$(
        mod $module {
            use super::*;

            #[idem::axum::idempotent(scope = tenant)]
            pub(crate) async fn tenant_note(
                tenant: Tenant,
                tx: idem::Tx<'_, $db>,
            ) -> (axum::http::StatusCode, axum::Json<serde_json::Value>) {
                let _ = (&tenant, &tx);
                (axum::http::StatusCode::CREATED, axum::Json(json!({ "note": "kept" })))
            }
        }
    )+};
}

tenant_notes_on_axum!(notes_on_postgres: sqlx::Postgres, notes_on_sqlite: sqlx::Sqlite);

/// A tenant named like the sender posts an event's id as its `Idempotency-Key` before the
/// sender delivers the event. The sender's keys live in their own namespace, so its
/// delivery runs; before, it got 422, whose detail told the tenant which route used the id.
async fn a_tenant_named_like_the_sender_cannot_take_its_event_ids<DB>()
where
    DB: Receiving,
{
    let env = Env::<DB>::open().await;
    let note = support::by_database::<DB, _>(
        || axum::routing::post(notes_on_postgres::tenant_note),
        || axum::routing::post(notes_on_sqlite::tenant_note),
    );
    let app = support::service_with_twin(
        &env.idem(),
        |cfg| {
            webhooks::configure::<DB>(cfg, signer());
            cfg.route(NOTES, web::post().to(tenant_note::<DB>));
        },
        || axum_webhooks::router::<DB>(signer()).route(NOTES, note),
    )
    .await;
    let squat = app
        .call(
            TestRequest::post()
                .uri(NOTES)
                .insert_header(("idempotency-key", "evt_t")),
        )
        .await;
    assert_eq!(squat.status, 201, "{squat:?}");
    let body = event("evt_t", "ch_t", 300);
    let first = app.call(delivery(webhooks::PATH, "evt_t", &body)).await;
    assert_recorded(&first, "evt_t");
    assert!(!first.replayed(), "{first:?}");
    assert_eq!(charge_events(&env, "evt_t").await, 1);
    let mut scopes: Vec<String> = env.key_rows().await.into_iter().map(|row| row.0).collect();
    scopes.sort();
    assert_eq!(
        scopes,
        [
            webhooks::SENDER.to_owned(),
            format!("webhook:{}", webhooks::SENDER)
        ]
    );
}

/// The fingerprint of a delivery as the version before the `webhook:` namespace stored it.
fn stored_before_the_namespace(body: &str) -> String {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "content-type",
        http::HeaderValue::from_static("application/json"),
    );
    let fingerprint =
        idem::Fingerprint::of_request("POST", webhooks::PATH, &headers, body.as_bytes())
            .expect("a JSON body");
    fingerprint
        .as_bytes()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A key the version before the namespace stored under the sender's bare name is still
/// the event's: its redelivery replays it (its effect is not repeated), a different body
/// under its id is 422, and no second key is made for it.
async fn an_event_stored_before_the_namespace_is_not_processed_again<DB>()
where
    DB: Receiving,
{
    let env = Env::<DB>::open().await;
    let app = receiver(&env).await;
    let body = event("evt_old", "ch_old", 400);
    let first = app.call(delivery(webhooks::PATH, "evt_old", &body)).await;
    assert_recorded(&first, "evt_old");
    // Make the row what the previous version stored: the bare sender, the old fingerprint.
    let hash = stored_before_the_namespace(&body);
    let literal = support::by_database::<DB, _>(
        || format!("decode('{hash}', 'hex')"),
        || format!("X'{hash}'"),
    );
    let moved = DB::scalar(
        &env.pool,
        &format!(
            "UPDATE idem_keys SET scope = '{sender}', request_hash = {literal} \
             WHERE scope = 'webhook:{sender}' AND idem_key = 'evt_old' RETURNING CAST(1 AS BIGINT)",
            sender = webhooks::SENDER
        ),
    )
    .await;
    assert_eq!(moved, 1);
    app.call(delivery(webhooks::PATH, "evt_old", &body))
        .await
        .assert_replay_of(&first);
    app.call(delivery(
        webhooks::PATH,
        "evt_old",
        &event("evt_old", "ch_old", 401),
    ))
    .await
    .assert_idem_problem(422, "idempotency-key-reused");
    assert_eq!(
        charge_events(&env, "evt_old").await,
        1,
        "the event ran once"
    );
    let scopes: Vec<String> = env.key_rows().await.into_iter().map(|row| row.0).collect();
    assert_eq!(scopes, [webhooks::SENDER], "no second key for the event");
}

/// A signed webhook's type under another name: the attribute cannot see it is one, so
/// the request is refused before anything runs.
type Hook = idem::SignedWebhook;

#[idem::idempotent(scope = sender)]
async fn aliased_receiver<DB: idem::Backend>(sender: Hook, tx: idem::Tx<'_, DB>) -> HttpResponse {
    let _ = (&sender, &tx);
    HttpResponse::Ok().finish()
}

macro_rules! aliased_on_axum {
    ($($module:ident: $db:ty),+) => {$(
        mod $module {
            use super::*;

            #[idem::axum::idempotent(scope = sender)]
            pub(crate) async fn aliased_receiver(sender: Hook, tx: idem::Tx<'_, $db>) -> &'static str {
                let _ = (&sender, &tx);
                "ran"
            }
        }
    )+};
}

aliased_on_axum!(aliased_on_postgres: sqlx::Postgres, aliased_on_sqlite: sqlx::Sqlite);

const ALIASED: &str = "/webhooks/aliased";

/// Keyed by `Idempotency-Key` under a signed sender's scope: a captured delivery resent
/// under fresh keys would run each time, so every request is refused with 500 and nothing
/// runs or is stored.
async fn a_signed_webhook_keyed_by_an_unsigned_header_is_refused<DB>()
where
    DB: Receiving,
{
    let env = Env::<DB>::open().await;
    let aliased = support::by_database::<DB, _>(
        || axum::routing::post(aliased_on_postgres::aliased_receiver),
        || axum::routing::post(aliased_on_sqlite::aliased_receiver),
    );
    let app = support::service_with_twin(
        &env.idem(),
        |cfg| {
            cfg.service(
                web::resource(ALIASED)
                    .app_data(signer())
                    .route(web::post().to(aliased_receiver::<DB>)),
            );
        },
        || {
            axum::Router::new()
                .route(ALIASED, aliased)
                .layer(axum::Extension(signer()))
        },
    )
    .await;
    let body = event("evt_a", "ch_a", 100);
    for key in ["k1", "k2"] {
        let reply = app
            .call(delivery(ALIASED, "evt_a", &body).insert_header(("idempotency-key", key)))
            .await;
        reply.assert_idem_problem(500, "not-configured");
    }
    assert_eq!(env.keys().await, 0, "nothing was stored");
}

/// The example's receiver passes every check of `idem::testing` that applies to it, each
/// delivery signed as the provider signs (the harness draws a fresh event id per check).
async fn the_example_receiver_passes_the_harness<DB>()
where
    DB: Receiving,
{
    let env = Env::<DB>::open().await;
    let idem = env.idem();
    let pool = env.pool.clone();
    let endpoint = idem::testing::Endpoint::post(webhooks::PATH)
        .key_header("webhook-id")
        .body("application/json", event("evt_h", "ch_h", 900))
        .mismatch_body(event("evt_h", "ch_h", 901))
        .effect(move || {
            let pool = pool.clone();
            Box::pin(async move { DB::scalar(&pool, "SELECT count(*) FROM charge_events").await })
        })
        // The example's test hook: 500 after the event is recorded.
        .fail_request(|request| request.query("fail=500"))
        // As the provider sends it: the body names the event's id too (the receiver
        // refuses a body whose id is not the webhook-id), and the whole is signed.
        .sign(|request| {
            let Some(id) = request.headers().get("webhook-id").cloned() else {
                return request; // the missing-key check's request
            };
            let id = id.to_str().expect("the harness's key is text").to_owned();
            let mut event: serde_json::Value =
                serde_json::from_slice(request.payload()).expect("a JSON event");
            event["id"] = json!(id);
            let body = event.to_string();
            let timestamp = now();
            let signature = signer().sign(&id, timestamp, body.as_bytes());
            request
                .body(body)
                .header("webhook-timestamp", &timestamp.to_string())
                .header("webhook-signature", &signature)
        })
        .store(&env.pool);
    let passed = match support::Framework::current() {
        support::Framework::Actix => {
            let app = actix_web::test::init_service(
                actix_web::App::new()
                    .configure(|cfg| support::app::configure(cfg, &idem))
                    .configure(|cfg| webhooks::configure::<DB>(cfg, signer())),
            )
            .await;
            endpoint.all(&app).await
        }
        support::Framework::Axum => {
            let app = DB::axum_router(&idem)
                .merge(axum_webhooks::router::<DB>(signer()))
                .layer(axum::Extension(idem.clone()));
            endpoint.all(&app).await
        }
    }
    .unwrap();
    for check in [
        "concurrency",
        "replay",
        "missing_key",
        "mismatch",
        "transient_failure",
        "expiry",
    ] {
        assert!(passed.seen().contains(check), "{check}: {passed}");
    }
}

/// The example's document describes the receiver as it answers: the event id from the
/// `webhook-id` header (required), no `Idempotency-Key`, idem's policy with that header,
/// and idem's problems for a missing or invalid id.
#[test]
fn the_receiver_is_documented_with_its_key_header() {
    use utoipa::OpenApi;
    let document = serde_json::to_value(example_openapi::ApiDoc::openapi()).expect("JSON");
    let operation = &document["paths"]["/webhooks/provider"]["post"];
    let parameters = operation["parameters"].as_array().expect("parameters");
    let names: Vec<&str> = parameters
        .iter()
        .map(|p| p["name"].as_str().expect("a name"))
        .collect();
    assert!(names.contains(&"webhook-id"), "{names:?}");
    assert!(names.contains(&"webhook-signature"), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n.eq_ignore_ascii_case("idempotency-key")),
        "{names:?}"
    );
    let id = parameters
        .iter()
        .find(|p| p["name"] == "webhook-id")
        .expect("the id header");
    assert_eq!(id["required"], true);
    assert_eq!(id["in"], "header");
    let policy = &operation["x-idempotency"];
    assert_eq!(policy["header"], "webhook-id", "{policy}");
    assert_eq!(policy["scope"], "sender", "{policy}");
    assert_eq!(policy["retention_seconds"], 5 * 24 * 3600, "{policy}");
    let bad_request = operation["responses"]["400"]["description"]
        .as_str()
        .expect("a 400");
    assert!(bad_request.contains("#event-id-missing"), "{bad_request}");
    assert!(bad_request.contains("#event-id-invalid"), "{bad_request}");
    assert!(
        !bad_request.contains("#idempotency-key-missing"),
        "{bad_request}"
    );
}

support::backend_tests!(
    twenty_concurrent_deliveries_record_the_event_once,
    a_delivery_that_crashed_before_its_commit_is_processed_once_on_redelivery,
    unverified_or_unkeyed_deliveries_are_refused_and_nothing_is_stored,
    the_same_event_id_with_another_body_is_a_422_and_the_first_effect_stands,
    a_captured_delivery_resent_with_a_query_does_not_lock_the_sender_out,
    a_tenant_named_like_the_sender_cannot_take_its_event_ids,
    an_event_stored_before_the_namespace_is_not_processed_again,
    a_signed_webhook_keyed_by_an_unsigned_header_is_refused,
    the_example_receiver_passes_the_harness,
);
support::actix_only_tests!(a_gzip_delivery_verifies_over_its_raw_bytes_on_both_paths);
support::both_frameworks!(
    #[actix_web::test]
    a_handler_keyed_by_a_json_field_replays_by_it
);
